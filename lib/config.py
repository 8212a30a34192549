"""One typed tree for every knob of the nightly consolidation pipeline.

- `ConsolidationConfig` is the root; each stage reads its own section (buffer, curation,
  sampling, tokenizer, model, training, checkpoints, eval, gate, serve, capture, proxy, orchestration,
  workspace).
- Defaults are the design seed's (000 section 5): new_data_ratio 0.1, lr_scale 0.1, warmup 0.1,
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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WorkspaceConfig(_Section):
    root: Path = Field(Path("workspace"), description="Folder that holds all state: buffers, corpora, runs, checkpoints, lineage.duckdb.")
    corpus: str | None = Field(None, description="Name of the replay corpus under <workspace>/corpora/ that every night replays and whose old_val the forgetting gate measures; none: the one the workspace was started with (consolidate init --replay, or the demo's stdlib).")


class BufferConfig(_Section):
    flush_size: int = Field(1000, ge=1, description="Records kept in memory (and in the write-ahead log) before a parquet file is written.")
    max_text_bytes: int = Field(10_000_000, ge=1, description="Largest accepted record in UTF-8 bytes; larger texts are refused with an error.")
    durability: Literal["fsync", "flush"] = Field("fsync", description="fsync: every added record is on disk before add returns (survives power loss); flush: handed to the OS (survives a killed process, not a power cut).")


class CurationConfig(_Section):
    exact_dedup: bool = Field(True, description="Drop documents whose normalised text (NFKC, lower case, collapsed whitespace) was seen tonight or on an earlier night.")
    near_dedup: bool = Field(True, description="Drop near-duplicates found with MinHash + LSH, tonight and against earlier nights.")
    threshold: float = Field(0.8, gt=0, lt=1, description="Jaccard similarity above which two documents count as near-duplicates.")
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations per signature.")
    ngram: int = Field(5, ge=1, le=64, description="Shingle size: words (shingle=word) or characters (shingle=char).")
    shingle: Literal["word", "char"] = Field("word", description="Shingles of whitespace-separated words (prose) or of characters (better for code).")
    verify_jaccard: bool = Field(True, description="Band the LSH for candidates 0.2 below the threshold and keep only pairs whose exact Jaccard (same shingles) reaches it; off: every LSH candidate is a duplicate (faster, finds ~half the pairs at the threshold).")
    min_chars: int = Field(48, ge=0, description="Documents shorter than this many characters are dropped (or concatenated, see concatenate_short).")
    max_chars: int = Field(100_000, ge=1, description="Documents longer than this are dropped or split (see long_docs).")
    long_docs: Literal["drop", "split"] = Field("split", description="What to do with documents over max_chars.")
    concatenate_short: bool = Field(True, description="Concatenate short documents up to max_chars instead of dropping them (seed 001).")
    languages: list[str] = Field(default_factory=lambda: ["en"], description="Languages to keep for prose (fastText lid.176 labels, e.g. en, de), judged on its prose lines; code gets the code rule instead. Empty list: no language filter.")
    language_threshold: float = Field(0.65, ge=0, le=1, description="Minimum language-ID confidence to keep a prose document.")
    language_min_prose_chars: int = Field(100, ge=0, description="A prose document is language-checked on its prose lines when they hold at least this many characters, else on its whole text.")
    detect_kinds: bool = Field(True, description="Tell code from prose by its lines (more characters on code lines than on prose lines: code). Off: every document not declared code is prose.")
    source_kinds: dict[str, Literal["code", "prose"]] = Field(default_factory=dict, description="Kinds declared by buffer record `source`, as fnmatch patterns, e.g. {'repo:*': 'code'}; a buffer file's own `kind` column wins; the rest is detected.")
    code_max_line_chars: int = Field(1000, ge=1, description="Code with a longer line is dropped (minified code, encoded data).")
    code_max_mean_line_chars: float = Field(100, gt=0, description="Code whose mean line length is larger is dropped.")
    code_min_alnum_share: float = Field(0.25, ge=0, le=1, description="Code with a smaller share of letters and digits is dropped.")
    code_drop_generated: bool = Field(True, description="Drop code with an autogenerated marker ('generated by', 'do not edit', '@generated', ...) in its first 5 lines.")
    max_drop_share: float = Field(0.5, gt=0, le=1, description="Warn (log, curated/stats.json, the curation-counts artifact) when one filter drops more than this share of the documents it saw.")
    quality_model: Path | None = Field(None, description="fastText quality classifier (.bin/.ftz) trained with `consolidate quality train`; none: no quality filter.")
    quality_threshold: float = Field(0.5, ge=0, le=1, description="Minimum probability of the positive label to keep a document.")
    workers: int | None = Field(None, ge=1, description="Processes for signature computation and tokenization; none: all cores.")
    shards: int | None = Field(None, ge=1, description="Shards of the night's buffer files, curated as parallel (mapped) tasks; none: one per worker, never more than the files.")


class SourceConfig(_Section):
    name: str = Field(description="Source name, as it appears in the manifest and in metrics.")
    path: Path = Field(description="Folder or file of parquet shards with a `text` column (relative paths are inside the workspace).")
    weight: float = Field(gt=0, description="Sampling weight, counted in tokens.")
    kind: Literal["corpus", "buffer", "memory", "curated"] = Field("curated", description="corpus: original training data; buffer: new data; memory: accepted nights' documents (their held-out parts stay out); curated: any other dataset.")
    fim_rate: float = Field(0.0, ge=0, le=1, description="Fraction of this source's documents turned into fill-in-the-middle examples (0 for prose, 0.5 for code).")


class SamplingConfig(_Section):
    new_data_ratio: float = Field(0.1, gt=0, le=1, description="Share of training tokens from tonight's new data; the rest is replay of the original corpus (seed default 1:9). new_data_ratio + memory_ratio = 1: no corpus replay at all (an ablation; expect forgetting).")
    memory_ratio: float = Field(0.1, ge=0, lt=1, description="Share of training tokens replayed from the memory (the documents earlier accepted nights trained on); the corpus gets 1 - new_data_ratio - memory_ratio. 0: replay the corpus only.")
    memory_recency: float = Field(0.7, gt=0, le=1, description="Weight of a memory document per night of age (the newest night 1, the one before 0.7, ...): recent nights are replayed more.")
    memory_exposure_power: float = Field(1.0, ge=0, description="Weight of a memory document ÷ (1 + times it was trained on)^power: documents seen least are replayed first.")
    sources: list[SourceConfig] = Field(default_factory=list, description="Extra sources (curated datasets). The corpus, tonight's data and the memory are added by themselves.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature T: p_i ∝ w_i^(1/T). 1 keeps the weights, larger flattens them.")
    final_temperature: float | None = Field(None, gt=0, description="Temperature at the end of training for an annealing schedule; none: constant.")
    temperature_schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="How T moves from temperature to final_temperature over training progress.")
    heldout_fraction: float = Field(0.1, ge=0, lt=1, description="Deterministic slice of tonight's curated data held out of training for the generalisation check.")
    heldout_min_docs: int = Field(4, ge=0, description="Held-out documents a night keeps at least, when it has twice as many (else the fraction alone; the gate then measures new_train).")
    seed: int = Field(0, description="Seed of the manifest draw; same inputs + same seed give a byte-identical manifest.")
    fim_rate_code: float = Field(0.5, ge=0, le=1, description="FIM rate of code sources (documents detected as code in the embedded corpus).")
    fim_spm_rate: float = Field(0.5, ge=0, le=1, description="Share of FIM examples in SPM order (the rest PSM).")
    fim_middle_only: bool = Field(False, description="Compute the loss on the middle span of FIM examples only (default: all tokens).")


class TokenizerConfig(_Section):
    path: Path | None = Field(None, description="Folder with tokenizer.json; none: the champion model's own tokenizer.")
    vocab_size: int = Field(4096, ge=256, le=1 << 20, description="Vocabulary size when a BPE tokenizer is trained (embedded demo only).")
    document_separator: str = Field(
        "auto", description="The token in front of every packed document and eval window, as the model saw between documents "
                            "in pre-training. auto: what the version recorded, else BOS when the tokenizer adds it (Llama, "
                            "Mistral, Gemma), else <|endoftext|> (GPT-2, Qwen2, Phi), else BOS, else EOS; or bos, eos, or a "
                            "token string of the tokenizer.")


class ModelConfig(_Section):
    """Architecture of a model pre-trained from scratch (the demo's v0). Consolidation reads the
    architecture from the champion's config.json instead."""

    hidden_size: int = Field(768, ge=8, description="Transformer width.")
    num_layers: int = Field(12, ge=1, description="Transformer blocks.")
    num_heads: int = Field(12, ge=1, description="Attention heads.")
    num_kv_heads: int | None = Field(None, ge=1, description="Key/value heads (grouped-query attention); none: as many as num_heads.")
    intermediate_size: int | None = Field(None, ge=8, description="MLP width; none: 8/3 × hidden_size rounded to 64.")
    max_position_embeddings: int = Field(2048, ge=16, description="Longest sequence the model attends over.")
    pretrain_lr: float = Field(3e-4, gt=0, description="Peak learning rate of v0's pre-training (the 'original LR' later consolidations scale).")
    pretrain_iterations: int = Field(5000, ge=1, description="Steps of v0's pre-training.")

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        return self


class TrainingConfig(_Section):
    num_iterations: int = Field(1000, ge=1, description="Optimizer steps of one consolidation (seed: make the new data seen 3-10 times).")
    total_batch_size: int = Field(524_288, ge=1, description="Tokens per optimizer step, over all ranks; reached with gradient accumulation.")
    device_batch_size: int = Field(32, ge=1, description="Sequences per forward pass on one device.")
    seq_len: int = Field(2048, ge=8, description="Tokens per training sequence (rows are seq_len + 1 for the shifted targets).")
    lr_scale: float = Field(0.1, gt=0, description="Peak LR = the parent's original LR × lr_scale (seed default 1/10).")
    warmup_ratio: float = Field(0.1, ge=0, le=1, description="Share of steps with linear LR warmup.")
    warmdown_ratio: float = Field(0.5, ge=0, le=1, description="Share of steps at the end with LR decay to final_lr_frac × peak.")
    final_lr_frac: float = Field(0.1, ge=0, le=1, description="LR at the last step as a fraction of the peak.")
    weight_decay: float = Field(0.1, ge=0, description="AdamW weight decay.")
    adam_betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW betas.")
    grad_clip: float = Field(1.0, ge=0, description="Gradient norm clipping; 0 disables it.")
    optimizer_state: Literal["fresh", "inherit"] = Field("fresh", description="Start AdamW moments from zero (fresh) or from the parent's saved state, LRs reset (seed 000 open question 4).")
    nproc_per_node: int = Field(1, ge=1, description="Processes torchrun starts on each node (GPUs per node on CUDA).")
    nnodes: int = Field(1, ge=1, description="Nodes for multi-node torchrun (each node runs the same command with its own --node-rank; see rdzv_endpoint).")
    rdzv_endpoint: str | None = Field(None, description="host:port of the rendezvous when nnodes > 1: the first node's address and a free port every node can reach (torchrun --rdzv-endpoint).")
    parallelism: Literal["ddp", "fsdp"] = Field(
        "ddp", description="ddp: every rank holds the whole model, its gradients and AdamW state (16 bytes per parameter). fsdp: FSDP2 "
                           "shards parameters, gradients and AdamW state over all ranks (16 / world bytes per parameter, plus one "
                           "or two gathered blocks at a time); needed when the model's 16 bytes per parameter do not fit one device.")
    compile: Literal["auto", "on", "off"] = Field(
        "auto", description="torch.compile each transformer block (on, off; true and false mean the same). auto: on for CUDA (as the reference trainers do; not yet measured "
                            "here), off on CPU (inductor took ~90 s to compile a tiny model's block on a busy 2-core machine; "
                            "its CPU speed-up is not measured).")
    compile_backend: str = Field(
        "inductor", min_length=1, description="torch.compile backend when compile is on: inductor generates fused kernels (on CPU it "
                                              "needs a C++ compiler and about a minute per block shape); aot_eager only traces the "
                                              "forward and backward graphs, to check that a model compiles without that cost.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available, else CPU.")
    snapshot_every: int = Field(100, ge=1, description="Save a resumable snapshot every this many steps (and on SIGTERM).")
    keep_snapshots: int = Field(2, ge=1, description="Complete snapshots kept; older ones are deleted.")
    time_limit_s: float | None = Field(None, gt=0, description="Wall-clock limit of the training step; the run is stopped (snapshot kept) past it.")
    activation_checkpointing: bool = Field(False, description="Recompute each transformer block's activations during the backward pass instead of keeping them: activation memory drops to about one block's plus each block's input, for about a third more compute per step.")
    memory_check: bool = Field(True, description="Estimate memory per rank (weights, gradients, AdamW, activations, logits) before training and refuse a run that cannot fit the device, naming the knob to turn.")
    seed: int = Field(1337, description="Seed of model init (v0) and of anything random in training.")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_switch(cls, value):
        # YAML reads on/off/true/false as booleans; the run form shows one list of three words
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _ratios(self) -> "TrainingConfig":
        if self.warmup_ratio + self.warmdown_ratio > 1:
            raise ValueError(f"warmup_ratio + warmdown_ratio must be at most 1, got {self.warmup_ratio} + {self.warmdown_ratio}")
        if self.rdzv_endpoint is not None and not re.fullmatch(r"\[?[\w.:-]+\]?:\d{1,5}", self.rdzv_endpoint):
            raise ValueError(f"rdzv_endpoint must be host:port (e.g. 10.0.0.5:29500), got {self.rdzv_endpoint!r}")
        return self


class CheckpointConfig(_Section):
    delta: bool = Field(True, description="Store versions that are neither champion nor latest as lossless zstd-compressed deltas against their parent (bf16: about a third of a full checkpoint; fp32: about 70%); champion and latest stay plain Hugging Face folders.")
    full_every: int = Field(5, ge=1, description="Store a full copy every this many versions in a chain, to bound restore time.")
    keep_optimizer_states: int | None = Field(
        1, ge=0, description="With training.optimizer_state=inherit: optimizer.pt (fp32 AdamW moments, twice an fp32 model's bytes) "
                             "is kept by the champion and this many newest accepted versions, deleted from the rest after each gate; "
                             "none keeps every one.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Precision of a version's stored weights (training keeps fp32 master weights either way). "
                            "auto: the parent's (a bf16 model stays bf16); float32 for a model pre-trained here.")
    master_weights: bool = Field(
        True, description="When versions are stored narrower than fp32 (bf16, fp16): keep the fp32 master weights beside the serving "
                          "folder (<version>/master/, an HF folder) and start the next night from them, so an update smaller than "
                          "half a bf16 step is not lost between nights. Stored as a delta against the version's own weights once "
                          "the version is no longer champion or latest.")
    keep_master_weights: int | None = Field(
        1, ge=0, description="master/ folders are kept by the champion and this many newest accepted versions, deleted from the rest "
                             "after each gate (a night from a version without one starts from its stored weights and says so); none keeps every one.")
    rounding: Literal["stochastic", "nearest"] = Field(
        "stochastic", description="How fp32 weights are rounded to a narrower storage dtype: stochastic (unbiased: a weight moves to the "
                                  "next representable value with probability proportional to how far the update went, so a gentle night's "
                                  "update survives on average) or nearest (round-to-nearest-even, the cast's default; updates under half "
                                  "a step vanish). Seeded by training.seed and the version name: a resumed run writes the same bytes.")
    serving_links: bool = Field(
        True, description="Keep <workspace>/serving/champion and <workspace>/serving/latest as links to full Hugging Face folders of "
                          "those versions, a stable path for vLLM, TGI or from_pretrained.")


class EvalConfig(_Section):
    max_docs: int | None = Field(None, ge=1, description="Cap on documents per evaluation set (a fixed sample by id hash); none: all.")
    max_bytes: int | None = Field(4_000_000, ge=1, description="Cap on UTF-8 bytes of text per evaluation set (the same fixed sample, cut at this size); none: all.")
    max_len: int | None = Field(None, ge=2, description="Tokens per eval window (separator included); none: training.seq_len, never more than the model's positions.")
    batch_size: int = Field(8, ge=1, description="Sequences per forward pass during evaluation (halved automatically when the device runs out of memory).")
    memory_sets: int | None = Field(8, ge=1, description="Earlier nights whose held-out sets each night checks (retention): all up to this many, then the newest half and an even spread of the older ones; none: all.")
    probes: Path | None = Field(None, description="JSONL file of {prompt, expected} probes scored before and after; none: no probes.")


class GateConfig(_Section):
    max_forgetting: float = Field(0.02, ge=0, description="Largest allowed relative rise of bits per byte on the original validation split (seed: 2%).")
    min_acquisition: float = Field(0.0, description="Smallest required relative drop of bits per byte on tonight's new data (0: must not get worse).")
    max_memory_forgetting: float = Field(0.02, ge=0, description="Largest allowed relative rise of bits per byte on any earlier night's held-out set against the champion: what night 1 taught must still be known on night 4.")
    max_cumulative_forgetting: float = Field(0.03, ge=0, description="Largest allowed relative rise of old_val bits per byte against the root version (v0), so small rises a night cannot add up unseen.")
    retry_on_forgetting: bool = Field(False, description="When the gate rejects for forgetting (old_val, an earlier night, or cumulative), retry the night once with safer settings: lr_scale and new_data_ratio halved, memory replay doubled.")
    probe_tolerance: float = Field(0.0, ge=0, description="Largest allowed drop in probe exact-match rate.")


class RolloutConfig(_Section):
    kind: Literal["none", "command", "sglang", "vllm"] = Field("none", description="How a new champion reaches the engine that serves it after a promotion. none: nobody is told (the engine keeps its model until someone restarts it; `consolidate serve` follows the champion on its own); command: run `command` with the champion's folder; sglang: POST <url>/update_weights_from_disk; vllm: POST <url>/sleep, /wake_up?tags=weights, /collective_rpc reload_weights, /wake_up (needs --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1; reload from disk has open bugs, so a restart command is the safe choice).")
    command: str | None = Field(None, description="kind=command: the command line run after a promotion, split like a shell would (no shell: write `sh -c '...'` for pipes). {path} and {version} are replaced by the champion's folder and version id; without either, the folder is appended as the last argument. Also in its environment: CONSOLIDATE_CHAMPION_PATH, CONSOLIDATE_CHAMPION_VERSION. Exit status 0 means live.")
    url: str | None = Field(None, description="kind=sglang or vllm: the engine's base URL, e.g. http://127.0.0.1:30000 (no /v1).")
    token: SecretStr | None = Field(None, description="Bearer token sent to the engine's admin endpoints (kind=sglang or vllm); none: no Authorization header.")
    timeout_s: float = Field(600.0, gt=0, description="Longest one push may take (a command's run time, or each HTTP call to the engine, model load included).")
    retries: int = Field(2, ge=0, le=20, description="Further attempts after a failed push (each recorded in lineage); the promotion stands either way.")
    retry_delay_s: float = Field(10.0, ge=0, description="Seconds between attempts of a failed push.")


class ProxyConfig(_Section):
    upstream: str | None = Field(None, description="Base URL of the OpenAI-compatible server the capture proxy forwards to (vLLM, SGLang, `consolidate serve`, ...), e.g. http://127.0.0.1:8000 (with or without /v1).")
    upstream_token: SecretStr | None = Field(None, description="Bearer token the proxy sends upstream in place of the client's; none: the client's Authorization header is forwarded as it came.")
    host: str = Field("127.0.0.1", description="Address the capture proxy listens on.")
    port: int = Field(8001, ge=1, le=65535, description="Port of the capture proxy.")
    timeout_s: float = Field(600.0, gt=0, description="Longest the proxy waits for the upstream (connect, or between two bytes of an answer) before answering 504.")
    max_connections: int = Field(256, ge=1, description="Concurrent connections the proxy keeps open to the upstream.")
    tokenizer: Path | None = Field(None, description="Folder of the served model's tokenizer, whose chat template renders captured chats; none: the tokenizer of the version lineage says is live (the champion), plain transcripts when the workspace has none.")


class ServeConfig(_Section):
    host: str = Field("127.0.0.1", description="Address the inference server listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Port of the inference server.")
    token: SecretStr | None = Field(None, description="Bearer token required by the server; none: no authentication.")
    capture: bool = Field(True, description="Write served conversations into the memory buffer (per-request opt-out).")
    strip_system_prompt: bool = Field(False, description="Leave system messages out of captured conversations (seed 000 open question 1).")
    strip_special_tokens: bool = Field(True, description="Remove tokenizer special tokens and <|name|> markers from captured plain text; a conversation rendered with the model's chat template always has its message contents cleaned (capture.format).")
    max_request_bytes: int = Field(1_000_000, ge=1, description="Largest accepted request body.")
    max_new_tokens: int = Field(512, ge=1, description="Largest generation length a request may ask for.")
    reload_interval_s: float = Field(2.0, ge=0, description="How often the server re-reads the champion alias from lineage (0: on every request); a moved alias reloads the model.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Device the served model runs on; auto: CUDA when available, else CPU.")
    flush_interval_s: float | None = Field(300.0, gt=0, description="The server writes captured records to a parquet file at least this often (the nightly run reads only parquet files, not a live server's write-ahead log); none: only every buffer.flush_size records and at shutdown.")
    cpu_threads: int | None = Field(None, ge=1, description="Torch CPU threads of the serving process; none: torch's default (one per core). Small models answer faster with 1 (tiny preset: 16 tokens in 0.13 s with 1 thread vs 1.2 s with 2 on a busy 2-core machine).")
    weight_updates: bool = Field(True, description="Accept SGLang's POST /update_weights_from_disk {\"model_path\": ...}: the server loads that checkpoint folder and serves it (instead of following the champion alias) until the next push or restart; guarded by serve.token. Off: 403.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="After a promotion: how the new champion is pushed to the engine that serves it, recorded in lineage.")


class CaptureConfig(_Section):
    format: Literal["chat_template", "plain"] = Field("chat_template", description="How a served conversation is written into the memory buffer. chat_template: rendered with the model's own chat template, as it was prompted (plain when the model has none); plain: a 'User: ... / Assistant: ...' transcript. On/off and stripping: serve.capture, serve.strip_*.")


class OrchestrationConfig(_Section):
    task_runner: Literal["threads", "ray"] = Field("threads", description="Where per-shard data tasks run: local threads or a Ray cluster (prefect-ray).")
    ray_address: str | None = Field(None, description="Ray cluster address; none with task_runner=ray: a local Ray.")
    train_deployment: str | None = Field(None, description="Name 'flow/deployment' of the GPU training deployment; none: train inline on this machine.")
    night_lock_timeout_s: float | None = Field(3600.0, ge=0, description="How long a night waits for another night (or bootstrap) on the same workspace to finish before it gives up, naming the holder (0: give up at once, as `consolidate run --no-wait` does; none: wait as long as it takes). A dead holder never blocks: its lock ends with its process.")
    train_lock: Path | None = Field(None, description="Lock file held for the whole torchrun; trainings that name the same file run one at a time. None: <workspace>/locks/training.lock (one per workspace); point workspaces that share a GPU at one file (e.g. /var/tmp/consolidation-training.lock); a relative path is inside the workspace.")
    train_lock_timeout_s: float | None = Field(3600.0, ge=0, description="How long a training waits for the training lock before it gives up, naming the holder (0: at once; none: as long as it takes).")


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


# The tiny preset: a ~3 M-parameter Llama, 4k BPE, 256-token rows, livelier LR and new-data share
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
            "seq_len": 256, "lr_scale": 0.3, "snapshot_every": 50,
        },
        "eval": {"max_docs": 200, "batch_size": 8},
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

PRESET_HELP = ("Sizes to start from: `tiny` for a CPU pool (a 3 M-parameter model, 256-token rows, a night in "
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
