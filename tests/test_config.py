from pathlib import Path

import pytest

from lib.config import ConfigError, ConsolidationConfig, load_config, parse_overrides
from lib.workspace import Workspace, WorkspaceError


def test_seed_defaults():
    cfg = ConsolidationConfig()
    assert cfg.sampling.new_data_ratio == 0.1
    assert cfg.training.lr_scale == 0.1
    assert cfg.training.warmup_ratio == 0.1
    assert cfg.training.warmdown_ratio == 0.5
    assert cfg.training.num_iterations == 1000
    assert cfg.training.total_batch_size == 524288
    assert cfg.gate.max_forgetting == 0.02


def test_every_field_has_a_description():
    def walk(model_cls, prefix=""):
        for name, field in model_cls.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann, f"{prefix}{name}.")
            else:
                assert field.description, f"{prefix}{name} has no description"

    walk(ConsolidationConfig)


def test_file_then_override(tmp_path: Path):
    yaml_file = tmp_path / "night.yaml"
    yaml_file.write_text("training:\n  lr_scale: 0.2\n  num_iterations: 50\nsampling:\n  new_data_ratio: 0.3\n")
    cfg = load_config(yaml_file, preset="tiny", overrides=["training.lr_scale=0.05", "gate.max_forgetting=0.01"])
    assert cfg.training.lr_scale == 0.05  # override beats file
    assert cfg.training.num_iterations == 50  # file beats preset
    assert cfg.training.seq_len == 256  # preset beats default
    assert cfg.sampling.new_data_ratio == 0.3
    assert cfg.gate.max_forgetting == 0.01

    toml_file = tmp_path / "night.toml"
    toml_file.write_text("[training]\nlr_scale = 0.4\n")
    assert load_config(toml_file).training.lr_scale == 0.4


@pytest.mark.parametrize(
    "override, field, reason",
    [
        ("training.lr_scale=-1", "training.lr_scale", "greater than 0"),
        ("sampling.new_data_ratio=1.5", "sampling.new_data_ratio", "less than or equal to 1"),
        ("training.num_iterations=abc", "training.num_iterations", "integer"),
        ("training.lr_sclae=0.1", "training.lr_sclae", "Extra inputs are not permitted"),
        ("training.warmup_ratio=0.6", "training", "warmup_ratio + warmdown_ratio"),
        ("model.num_heads=5", "model", "not divisible"),
    ],
)
def test_bad_values_name_the_field(override, field, reason):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[override])
    message = str(info.value)
    assert field in message and reason in message


def test_bad_files_and_overrides(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("training: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_overrides(["lr_scale"])
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config(preset="huge")


def test_secrets_masked_in_dict():
    cfg = load_config(overrides=["serve.token=s3cret-token"])
    assert cfg.serve.token.get_secret_value() == "s3cret-token"
    assert "s3cret-token" not in str(cfg.to_dict())


def test_workspace_refuses_paths_outside(tmp_path):
    ws = Workspace(tmp_path / "ws").ensure()
    assert ws.resolve("buffers/a.parquet") == ws.buffers / "a.parquet"
    for bad in ["../escape", "/etc/passwd", "buffers/../../x"]:
        with pytest.raises(WorkspaceError, match="outside the workspace"):
            ws.resolve(bad)
    (ws.root / "link").symlink_to(tmp_path)
    with pytest.raises(WorkspaceError):
        ws.resolve("link/other")
    with pytest.raises(WorkspaceError, match="not valid"):
        ws.checkpoint("../v1")
    assert ws.run("night-1").prepared.manifest == ws.runs / "night-1" / "manifest.parquet"


# -- presets by name and the run form ------------------------------------------------------------

NIGHTLY = ("workspace", "buffer", "curation", "sampling", "tokenizer", "training", "checkpoints", "eval", "gate", "orchestration")


def test_a_preset_named_in_the_data_lies_under_the_given_values():
    from lib.config import build_config

    cfg = build_config({"preset": "tiny", "training": {"num_iterations": 5}})
    assert cfg.training.seq_len == 256 and cfg.training.num_iterations == 5 and cfg.model.hidden_size == 128
    assert build_config({"preset": "default"}) == ConsolidationConfig()
    with pytest.raises(ConfigError, match="unknown preset 'huge'; choose one of default, tiny"):
        build_config({"preset": "huge"})


def _walk(node, path=""):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}/{i}")


def _submitted(schema, values):
    """What the Prefect UI's run form submits: the deployment's values, and every default the form
    shows for a field that has none."""
    out = dict(values)
    for name, prop in schema["properties"].items():
        if prop.get("type") == "object" and "properties" in prop:
            out[name] = _submitted(prop, values.get(name, {}))
        elif name not in out and "default" in prop:
            out[name] = prop["default"]
    return out


def test_the_run_form_shows_a_preset_and_the_sections_of_its_flow_without_glitches():
    from lib.config import PRESETS, form_schema

    schema = form_schema(*NIGHTLY)
    assert list(schema["properties"]) == ["preset", *NIGHTLY]  # the preset on top, no serve or model
    assert schema["properties"]["preset"]["enum"] == list(PRESETS)
    for path, node in _walk(schema):
        assert not (isinstance(node, dict) and ("$ref" in node or "anyOf" in node or node.get("type") == "null")), path
    training = schema["properties"]["training"]["properties"]
    assert "default" not in training["seq_len"] and "(default: 2048; tiny: 256)" in training["seq_len"]["description"]
    assert training["weight_decay"]["default"] == 0.1 and training["seq_len"]["title"] == "seq_len"
    assert training["time_limit_s"]["type"] == "number" and "Empty: none." in training["time_limit_s"]["description"]
    workers = schema["properties"]["curation"]["properties"]["workers"]
    assert workers["type"] == "integer" and workers["description"].endswith("; empty: all cores.")
    assert "replay corpus under `<workspace>/corpora/` that every night replays" in schema["properties"]["workspace"]["properties"]["corpus"]["description"]
    assert training["adam_betas"]["items"] == {"type": "number"}
    assert schema["properties"]["curation"]["properties"]["languages"]["default"] == ["en"]
    with pytest.raises(ValueError, match="unknown config section"):
        form_schema("training", "trainig")


def test_what_the_form_submits_is_the_preset_the_deployment_names(tmp_path):
    from prefect.utilities.schema_tools.validation import is_valid_schema, validate

    from lib.config import build_config, form_schema

    schema = form_schema(*NIGHTLY)
    deployed = {"preset": "tiny", "workspace": {"root": str(tmp_path)}}
    sent = _submitted(schema, deployed)
    assert build_config(sent) == load_config(preset="tiny", overrides=[f"workspace.root={tmp_path}"])
    sent["training"]["num_iterations"] = 7  # a field typed into the form wins over the preset
    assert build_config(sent).training.num_iterations == 7 and build_config(sent).training.seq_len == 256
    # Prefect's server validates run parameters against the form; a CLI caller's whole config passes too
    wrapped = {"type": "object", "properties": {"cfg": schema}, "required": ["cfg"]}
    is_valid_schema(wrapped)
    assert validate({"cfg": sent}, wrapped) == []
    assert validate({"cfg": load_config(preset="tiny").to_dict()}, wrapped) == []
    assert validate({"cfg": {**sent, "training": {"num_iterations": "many"}}}, wrapped)
