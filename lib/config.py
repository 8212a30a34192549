"""One typed tree for every knob of the nightly consolidation pipeline.

- `ConsolidationConfig` is the root; each stage reads its own section (buffer, curation,
  sampling, tokenizer, model, training, checkpoints, eval, gate, serve, capture, proxy, orchestration,
  workspace).
- Defaults are the conservative ones (a tenth new data, a tenth of the original LR): new_data_ratio 0.1, lr_scale 0.1, warmup 0.1,
  warmdown 0.5, 1000 iterations of 524,288 tokens, forgetting gate at +2% bits per byte.
- Field descriptions are the documentation: the Prefect UI renders them as the run form.
- `load_config(path, preset, overrides)` merges, in order: a preset (`default` or `tiny`), a YAML
  or TOML file, then `section.key=value` overrides from the command line. Unknown keys are errors
  (a typo must not silently fall back to a default).
- A bad value raises `ConfigError` naming the field, the reason and the value given.

Trade-off: one model for everything makes the UI form long, but there is exactly one place where
a knob is defined, validated and documented.
- `run_form(*sections)` is how a flow takes the config as its parameter: the same model, with the
  JSON schema the Prefect UI renders cut to the sections that flow uses and a `preset` select
  on top (see the end of this module).
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, WithJsonSchema, field_validator, model_validator


from lib.config_sections import (  # noqa: F401 (the sections are part of lib.config's interface)
    _Section, WorkspaceConfig, BufferConfig, CurationConfig, SourceConfig, SamplingConfig, TokenizerConfig, ModelConfig, TrainingConfig, CheckpointConfig, EvalConfig, KnowledgeConfig, GateConfig, ServeConfig, RolloutConfig, ProxyConfig, CaptureConfig, OrchestrationConfig,
)


class ConsolidationConfig(_Section):
    """Everything one nightly consolidation needs to know."""

    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    curation: CurationConfig = Field(default_factory=CurationConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    checkpoints: CheckpointConfig = Field(default_factory=CheckpointConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    knowledge: KnowledgeConfig = Field(default_factory=KnowledgeConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    capture: CaptureConfig = Field(default_factory=CaptureConfig)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    orchestration: OrchestrationConfig = Field(default_factory=OrchestrationConfig)

    @model_validator(mode="before")
    @classmethod
    def _start_from_preset(cls, data: Any) -> Any:
        """`{"preset": "tiny", "training": {...}}`: the preset's values under the given ones (what
        a run form or a config file that names a preset means)."""
        if isinstance(data, dict) and "preset" in data:
            data = dict(data)
            name = data.pop("preset")
            if name not in PRESETS:
                raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
            data = _deep_merge(PRESETS[name], data)
        return data

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict with secrets masked: safe for lineage, logs and artifacts."""
        return json.loads(self.model_dump_json())


# The tiny preset: a 1.4 M-parameter Llama (tied embeddings), 4k BPE, 256-token rows, livelier LR and new-data share
# so that learning shows within minutes on 2 CPU cores (shared/NOTES.md replay experiment).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "tiny": {
        "buffer": {"flush_size": 100},
        "curation": {"min_chars": 48, "max_chars": 8000},
        "sampling": {"new_data_ratio": 0.25},
        "tokenizer": {"vocab_size": 4096},
        "model": {
            "hidden_size": 128, "num_layers": 4, "num_heads": 4, "intermediate_size": 384,
            "max_position_embeddings": 256, "pretrain_lr": 3e-3, "pretrain_iterations": 500,
        },
        "training": {
            "num_iterations": 200, "total_batch_size": 2048, "device_batch_size": 8,
            # lr_scale 0.3: at 1.0 (what bench/bench_facts.py runs: a night then stores its facts) the demo's
            # night rose old_val 2.4% and the gate refused it (docs/knowledge.md)
            "seq_len": 256, "lr_scale": 0.3, "snapshot_every": 50,
        },
        "eval": {"max_docs": 200, "batch_size": 8},
        # a model pre-trained for minutes needs many exposures of each form to answer its facts (a
        # real pre-trained one ~5: the default): 28 gave 74-91% of a night's facts, 60 gave 85-97%;
        # a set of long names (orchestras) needs ~2,300 steps for 60: capped at 5x (1,000 steps, 26
        # exposures) 61%, so the cap is 7x (1,400 steps, ~8 min on 2 cores), docs/knowledge.md
        "knowledge": {"min_exposures": 60, "max_steps_factor": 7},
        "serve": {"cpu_threads": 1},
    },
}


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; the message names the field."""


def _deep_merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _parse_value(text: str) -> Any:
    """Parse a command-line value the way YAML would: numbers, booleans, null, lists."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """Turn ["training.lr_scale=0.3", ...] into a nested dict."""
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r}: expected section.key=value, e.g. training.lr_scale=0.3")
        node = tree
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part} is set twice")
        node[parts[-1]] = _parse_value(value.strip())
    return tree


def read_config_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml", ".json"):
            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"config file {path}: expected .yaml, .yml, .toml or .json")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid {path.suffix[1:].upper()}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of sections")
    return data


def _explain(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(root)"
        given = err.get("input")
        given_text = "" if isinstance(given, dict) else f" (got {given!r})"
        lines.append(f"{field}: {err['msg']}{given_text}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def build_config(data: dict[str, Any]) -> ConsolidationConfig:
    try:
        return ConsolidationConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc)) from None


def load_config(
    path: str | Path | None = None,
    preset: str = "default",
    overrides: list[str] | None = None,
) -> ConsolidationConfig:
    """Preset, then file, then `section.key=value` overrides; validated once at the end."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    data = PRESETS[preset]
    if path is not None:
        data = _deep_merge(data, read_config_file(path))
    if overrides:
        data = _deep_merge(data, parse_overrides(overrides))
    return build_config(data)


# -- the run form ---------------------------------------------------------------------------------
# A flow declares `cfg: run_form("workspace", "curation", ...)`: validation is ConsolidationConfig's
# own (a CLI caller still passes the whole tree), only the JSON schema the Prefect UI renders as
# the run form is a view of it:
# - a `preset` select on top; a field some preset changes has no default in the form, so a field
#   left empty takes the chosen preset's value and a field filled in wins (the UI submits every
#   default it shows, which would otherwise override the preset);
# - only the sections the flow reads;
# - `X | None` shown as an X input that may stay empty (the UI renders the null branch of anyOf
#   as "Property is type None"), defaults made by a factory written out, labels = field names,
#   `<workspace>` kept as text (as a code span: V1 renders descriptions as markdown with HTML,
#   V2 as plain text).

PRESET_HELP = ("Sizes to start from: `tiny` for a CPU pool (a 1.4 M-parameter model, 256-token rows, a night in "
               "minutes), `default` for a GPU pool (the design's sizes: 1000 steps of 524,288 tokens at 2048). "
               "A field below left empty takes the preset's value; a field filled in wins.")


def _preset_values(section: str, field: str) -> dict[str, Any]:
    """The value of `section.field` under each preset, where any preset changes it."""
    default = ConsolidationConfig.model_fields[section].default_factory().model_dump(mode="json")[field]
    values = {name: p.get(section, {}).get(field, default) for name, p in PRESETS.items()}
    return values if any(v != default for v in values.values()) else {}


def _form_value(value: Any) -> str:
    return "none" if value is None else json.dumps(value)


_PLACEHOLDER = re.compile(r"[^\s`]*<[A-Za-z_][\w-]*>[^\s`]*")


def _as_markdown(text: str) -> str:
    """Prefect's V1 UI renders descriptions as markdown with HTML, where `<workspace>/corpora/`
    would be taken for a tag and vanish; its V2 UI shows them as plain text, where an entity
    would show as `&lt;`. A code span reads right in both."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = _PLACEHOLDER.sub(lambda m: f"`{m.group(0)}`", parts[i])
    return "`".join(parts)


_NONE_MEANS = re.compile(r"\b([Nn])one( with [^:;]*)?:")


def _form_field(prop: dict[str, Any], name: str, model: type[BaseModel], section: str | None) -> dict[str, Any]:
    prop = copy.deepcopy(prop)
    prop["title"] = name
    field = model.model_fields[name]
    if field.default_factory is not None and "default" not in prop:
        prop["default"] = json.loads(json.dumps(field.default_factory(), default=str))
    notes, nullable = [], False
    options = prop.get("anyOf")
    if options and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) == 1:  # X | None -> an X input that may stay empty (not sent: the default None)
            del prop["anyOf"]
            prop.update(rest[0])
            if prop.get("default", "x") is None:
                del prop["default"]
                nullable = True
    if "prefixItems" in prop:  # a fixed-length tuple -> an array of its one item type
        kinds = prop.pop("prefixItems")
        if all(k == kinds[0] for k in kinds):
            prop["items"] = kinds[0]
    description = prop.get("description", "")
    per_preset = _preset_values(section, name) if section is not None else {}
    if per_preset:
        prop.pop("default", None)
        notes.append("Empty: the preset's value (" + "; ".join(f"{p}: {_form_value(v)}" for p, v in per_preset.items()) + ").")
    elif nullable:  # "none: all cores" reads "empty: all cores" in a form
        description, found = _NONE_MEANS.subn(lambda m: ("E" if m.group(1) == "N" else "e") + "mpty" + (m.group(2) or "") + ":", description)
        if not found:
            notes.append("Empty: none.")
    prop["description"] = _as_markdown(" ".join([description, *notes]).strip())
    return prop


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _section_form(model: type[BaseModel], defs: dict[str, Any], section: str | None) -> dict[str, Any]:
    schema = _inline(model.model_json_schema(), defs)
    schema["properties"] = {name: _form_field(prop, name, model, section) for name, prop in schema["properties"].items()}
    for prop in schema["properties"].values():  # nested models (sampling.sources items)
        items = prop.get("items")
        if isinstance(items, dict) and items.get("type") == "object" and "properties" in items:
            item_model = model.model_fields[prop["title"]].annotation.__args__[0]
            prop["items"] = _section_form(item_model, defs, None)
    schema.pop("$defs", None)
    return schema


def form_schema(*sections: str) -> dict[str, Any]:
    """The run-form JSON schema of ConsolidationConfig cut to `sections` (see `run_form`)."""
    unknown = [s for s in sections if s not in ConsolidationConfig.model_fields or s == "preset"]
    if unknown:
        raise ValueError(f"unknown config section(s) {unknown}; sections are {', '.join(ConsolidationConfig.model_fields)}")
    defs = ConsolidationConfig.model_json_schema()["$defs"]
    properties: dict[str, Any] = {"preset": {"title": "preset", "type": "string", "enum": list(PRESETS),
                                             "default": "default", "description": PRESET_HELP, "position": 0}}
    for position, name in enumerate(sections, start=1):
        model = ConsolidationConfig.model_fields[name].annotation
        section = _section_form(model, defs, name)
        section.update(title=name, position=position)
        properties[name] = section
    return {"type": "object", "title": "ConsolidationConfig", "properties": properties,
            "description": "The consolidation config: the sections this flow reads (lib/config.py documents every field)."}


def run_form(*sections: str) -> Any:
    """`ConsolidationConfig` as a flow parameter whose UI form shows `sections` under a preset
    select. Validation is unchanged: a caller may pass a whole ConsolidationConfig."""
    return Annotated[ConsolidationConfig, WithJsonSchema(form_schema(*sections))]
