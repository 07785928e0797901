"""Train one candidate: AdamW with linear warmup and cosine decay (the paper's recipe), gradient
clipping, bf16 autocast on CUDA, a token budget, seeding, checkpoints that resume exactly.

Failures are data, not crashes: a NaN/inf loss ends the run with ``status="failed"``
(``error_kind="nan"``), CUDA out-of-memory with ``status="infeasible"`` (``error_kind="oom"``) and
the memory that was asked for. The caller (a search trial) always gets a :class:`TrainResult`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.config import ModelConfig
from hlnas.data.packing import TokenStream
from hlnas.training.targets import split_targets
from hlnas.data.sources import DataConfig
from hlnas.errors import ConfigError, HlnasError
from hlnas.model.layout import Layout
from hlnas.model.build import HybridLM, build_model, seeded_model
from hlnas.overrides import config_to_dict
from hlnas.training.checkpoint import resume, save_checkpoint
from hlnas.training.head_loss import lm_step_loss
from hlnas.training.loop import autocast_dtype, cosine_lr, device_name, run_steps  # noqa: F401  (cosine_lr, device_name: re-exported)
from hlnas.training.step import compiled, make_optimizer, make_step
from hlnas.lm.validation import validation_loss

__all__ = ["TrainConfig", "TrainResult", "NonFiniteLoss", "train", "load_checkpoint", "resolve_device", "device_name", "cosine_lr", "lr_at"]

CHECKPOINT = "checkpoint.pt"
# steps left out of steady_tokens_per_s: the first calls compile (torch.compile, Triton kernels and their autotune)
STEADY_AFTER = 3


class NonFiniteLoss(HlnasError):
    def __init__(self, step: int, loss: float):
        self.step, self.loss = step, loss
        super().__init__(f"loss became {loss} at step {step}; lower the learning rate or check the data")


#: recall-format documents the recall protocol can mix into training (``TrainConfig.recall_format``)
RECALL_FORMATS = ("ruler", "mqar")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    tokens: int = 1_000_000  # training budget in tokens (rounded down to whole steps)
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_frac: float = 0.05  # fraction of steps with linear warmup
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    autocast: str = "auto"  # auto (bf16 on CUDA, off on CPU) | bf16 | off
    compile: bool = False
    # on CUDA, the whole step (forward, backward, clipping, AdamW) as one captured CUDA graph (hlnas.training.step), as the
    # recall proxy does, around the compiled model when compile is on (the recall step measured 1.6-2.0x that way on a
    # GPU); eager on CPU or when capture fails (its reason logged once)
    graph: bool = True
    log_every: int = 10
    checkpoint_every: int = 0  # steps; 0 = only at the end and on interrupt
    val_batches: int = 8
    recall_every: int = 0  # mix recall_count recall-format documents after every N corpus documents (0 = off)
    recall_count: int = 1  # recall documents per insertion (short MQAR instances need many per corpus document)
    recall_length: int = 0  # context of the mixed recall documents (0 = seq_len)
    recall_format: str = "ruler"  # ruler: RULER instances as text | mqar: MQAR instances as tokens
    recall_kv_pairs: int = 8  # mqar format: key-value pairs per instance
    recall_vocab: int = 64  # mqar format: symbols (keys take half, values half)

    def __post_init__(self) -> None:
        positive = ("tokens", "batch_size", "seq_len", "log_every", "val_batches")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"train.lr must be a positive number, got {self.lr}")
        if not 0 <= self.warmup_frac < 1:
            raise ConfigError(f"train.warmup_frac must be in [0, 1), got {self.warmup_frac}")
        if self.recall_format not in RECALL_FORMATS:
            raise ConfigError(f"train.recall_format '{self.recall_format}' is not allowed; allowed: {', '.join(RECALL_FORMATS)}")
        if self.recall_count < 1:
            raise ConfigError(f"train.recall_count must be >= 1, got {self.recall_count}")
        if self.recall_every < 0 or self.recall_length < 0:
            raise ConfigError(f"train.recall_every and train.recall_length must be >= 0, got {self.recall_every} and {self.recall_length}")
        if self.recall_format == "mqar" and self.recall_every:
            L, K, V = self.recall_length or self.seq_len, self.recall_kv_pairs, self.recall_vocab
            if L % 2 or K < 1 or 4 * K > L:
                raise ConfigError(f"train.recall_format mqar needs an even recall length L (recall_length, or seq_len) and 1 <= recall_kv_pairs <= L/4; got L={L}, recall_kv_pairs={K}")
            if V < 2 * K + 2:
                raise ConfigError(f"train.recall_vocab={V} holds {max(V // 2 - 1, 0)} distinct keys; recall_kv_pairs={K} needs recall_vocab >= {2 * K + 2}")
        if not isinstance(self.device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ConfigError(f"train.device={self.device!r} is not allowed; allowed: auto, cpu, cuda, cuda:N")
        if self.autocast not in ("auto", "bf16", "off"):
            raise ConfigError(f"train.autocast '{self.autocast}' is not allowed; allowed: auto, bf16, off")
        if self.steps < 1:
            raise ConfigError(
                f"train.tokens={self.tokens} is less than one step of batch_size*seq_len={self.batch_size * self.seq_len} tokens"
            )

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def steps(self) -> int:
        return self.tokens // self.tokens_per_step

    def to_dict(self) -> dict:
        from hlnas.overrides import config_to_dict

        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        from hlnas.overrides import config_from_dict

        return config_from_dict(cls, data, "train")


@dataclass
class TrainResult:
    status: str  # ok | failed | infeasible | interrupted
    layout: str
    params: int
    steps: int = 0
    tokens: int = 0
    final_loss: float | None = None  # loss of the last step
    val_loss: float | None = None
    tokens_per_s: float | None = None  # over every step of this run, first-step compile included
    steady_tokens_per_s: float | None = None  # after the first STEADY_AFTER steps (compile, autotune): the kernels' speed
    wall_s: float = 0.0
    error_kind: str | None = None  # nan | oom | other
    error: str | None = None
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, loss) every log_every
    device: str = "cpu"
    out_dir: str | None = None
    step_mode: str = "eager"  # eager | graph: how the training step ran (hlnas.training.step)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"train.device={name!r} but no CUDA device is available; use 'cpu' or 'auto'")
    return dev


def lr_at(step: int, cfg: TrainConfig) -> float:
    """The training schedule (the paper's recipe: AdamW, warmup, cosine)."""
    return cosine_lr(step, cfg.steps, cfg.lr, cfg.warmup_frac, cfg.min_lr_ratio)


def _graphed(cfg: TrainConfig, device: torch.device) -> bool:
    return cfg.graph and device.type == "cuda"


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy; targets are -100 where a document marks its tokens input-only."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)


def _oom_message(e: BaseException) -> str:
    m = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", str(e))
    asked = m.group(1) if m else "unknown"
    return f"CUDA out of memory: tried to allocate {asked} ({str(e).splitlines()[0][:200]})"


def evaluate_loss(model: HybridLM, batches: list[torch.Tensor], cfg: TrainConfig, device: torch.device) -> float:
    """The run's held-out loss, under its own autocast (:func:`validation_loss`)."""
    return validation_loss(model, batches, device, autocast_dtype(cfg.autocast, device))["loss"]


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> tuple[HybridLM, dict]:
    """Model and metadata (layout, model/train/data configs, step) from a training checkpoint."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT
    if not p.exists():
        raise HlnasError(f"no checkpoint at '{path}'; give a training output directory or its {CHECKPOINT}")
    state = torch.load(p, map_location=map_location, weights_only=False)
    meta = state["meta"]
    model = build_model(Layout.parse(meta["layout"]), ModelConfig.from_dict(meta["model"]))
    model.load_state_dict(state["model"])
    return model, {**meta, "step": state["step"]}


class _Interrupt:
    """Turns SIGINT/SIGTERM into a flag so the loop can checkpoint before leaving."""

    def __init__(self):
        self.hit = False
        self._old: dict = {}

    def __enter__(self):
        if hasattr(signal, "SIGTERM") and _main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.hit = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def train(
    layout: Layout,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    data_cfg: DataConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    stop_after: int | None = None,
    extra_docs=None,
    tokenizer=None,
) -> TrainResult:
    """Train ``layout`` and return its result; never raises for NaN loss or OOM.

    With ``out_dir`` a checkpoint is written there (periodically, at the end and on SIGINT/SIGTERM),
    and a later call with the same ``out_dir`` resumes from it. ``stop_after`` ends the run after that
    many steps as if interrupted (used to test resume). ``extra_docs(seed) -> Iterator[str]`` supplies
    the documents mixed in every ``train_cfg.recall_every`` corpus documents (the recall protocol;
    built by the caller, e.g. from :func:`hlnas.recall.ruler.ruler_training_documents`). ``tokenizer``: ``data_cfg``'s,
    when the caller has loaded it already (else the data stream loads it).
    """
    data_cfg = data_cfg or DataConfig()
    device = resolve_device(train_cfg.device)
    model = seeded_model(layout, model_cfg, train_cfg.seed).to(device)
    result = TrainResult(status="ok", layout=str(layout), params=model.num_params(), device=str(device),
                         out_dir=None if out_dir is None else str(out_dir))
    ckpt = Path(out_dir) / CHECKPOINT if out_dir is not None else None
    opt = make_optimizer(model, train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2),
                         weight_decay=train_cfg.weight_decay, graph=_graphed(train_cfg, device))
    start, losses = resume(ckpt, layout, train_cfg, model, opt, device)
    if losses is not None:
        result.losses = losses
    mix = ({"extra_docs": extra_docs, "extra_every": train_cfg.recall_every, "extra_count": train_cfg.recall_count}
           if extra_docs and train_cfg.recall_every else {})
    stream = TokenStream(data_cfg, train_cfg.seq_len, tokenizer=tokenizer, **mix)
    if stream.vocab_size > model.cfg.vocab_size:  # ids past the embedding would fail inside the first step
        raise ConfigError(f"model.vocab_size={model.cfg.vocab_size} is smaller than the data's tokenizer "
                          f"({data_cfg.tokenizer!r}: {stream.vocab_size} ids); set model.vocab_size: {stream.vocab_size}")
    # what a checkpoint records of the run (load_checkpoint, resume): the configs as their to_dict writes them
    meta = {"layout": str(layout), **{k: config_to_dict(c) for k, c in (("model", model.cfg), ("train", train_cfg),
                                                                        ("data", data_cfg))}}
    run = _Run(model=model, opt=opt, cfg=train_cfg, device=device, result=result, start=start, ckpt=ckpt, meta=meta,
               stop_after=stop_after, progress=progress)
    try:
        with _Interrupt() as interrupt:
            run.interrupt = interrupt
            run.train(stream)
    except NonFiniteLoss as e:
        result.status, result.error_kind, result.error = "failed", "nan", str(e)
    except torch.cuda.OutOfMemoryError as e:
        result.status, result.error_kind, result.error = "infeasible", "oom", _oom_message(e)
        del e
        torch.cuda.empty_cache()
    run.finish(stream)
    if out_dir is not None:
        (Path(out_dir) / "train_metrics.json").write_text(json.dumps(result.to_dict(), indent=1))
    # handed to scoring in the same process: the model, and (set by finish) the validation batches it was measured on
    result.model = model  # type: ignore[attr-defined]
    return result


@dataclass(kw_only=True)
class _Run:
    """One LM training's state as :func:`hlnas.training.loop.run_steps` drives it: what the trainer does after each
    step (read the loss, log, checkpoint, stop on an interrupt) and how it closes the run."""

    model: HybridLM
    opt: torch.optim.Optimizer
    cfg: TrainConfig
    device: torch.device
    result: TrainResult
    start: int
    ckpt: Path | None
    meta: dict
    stop_after: int | None
    progress: bool = False  # a progress bar over the run's tokens (tqdm), shown while it trains
    interrupt: _Interrupt | None = None
    bar: object = None
    done: int = 0
    loss_val: float | None = None
    loss: Tensor | None = None
    read: bool = True
    mode: str = "eager"
    t0: float = 0.0
    t_steady: float | None = None  # set when STEADY_AFTER steps of this run have finished

    def _on_device(self, batch):
        tokens, targets = split_targets(batch)  # targets: -100 where a document says input only
        return tokens[:, :-1].to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)

    def train(self, stream: TokenStream) -> None:
        """Train from ``start`` to the configured steps (or a stop), under the run's progress bar."""
        self.bar = _bar(self.progress, self.cfg, self.start)
        try:
            self._steps(stream)
        finally:
            if self.bar is not None:
                self.bar.close()

    def _steps(self, stream: TokenStream) -> None:
        cfg, start = self.cfg, self.start
        self.t0, self.done = time.perf_counter(), start
        batches = stream.train_batches(cfg.batch_size, start_step=start)
        first = next(batches, None) if start < cfg.steps else None
        if first is None:
            return
        loss_fn, model_kwargs = lm_step_loss(self.model, self.device, lm_loss)  # the head's loss in chunks on CUDA
        step_fn, mode = make_step(compiled(self.model, cfg.compile, "train.compile"), self.opt, loss_fn,
                                  self._on_device(first), graph=_graphed(cfg, self.device), clip=cfg.grad_clip,
                                  autocast=autocast_dtype(cfg.autocast, self.device), rewind_warmup=True,
                                  model_kwargs=model_kwargs)
        self.result.step_mode, self.mode = mode, mode
        self.done = run_steps(step_fn, self.opt, map(self._on_device, itertools.chain([first], batches)),
                              lambda step: lr_at(step, cfg), start=start, stop=cfg.steps, after_step=self._after_step)
        if self.done > start and not self.read:  # the last step's loss, not the last one read
            self.loss_val = self.loss.item()
            if not math.isfinite(self.loss_val):
                raise NonFiniteLoss(self.done - 1, self.loss_val)

    def _after_step(self, done: int, loss: Tensor) -> bool:
        cfg, start, result = self.cfg, self.start, self.result
        self.done, self.loss = done, loss
        # reading the loss waits for the device: every step when eager (a NaN stops the run at once), only at
        # log points and the steady-state mark under a graph, so the CPU queues steps ahead
        self.read = (self.mode == "eager" or done % cfg.log_every == 0 or done == cfg.steps or done - start == STEADY_AFTER)
        if self.read:
            self.loss_val = loss.item()
            if not math.isfinite(self.loss_val):
                raise NonFiniteLoss(done - 1, self.loss_val)
        if done - start == STEADY_AFTER:
            self.t_steady = time.perf_counter()  # loss.item() above synchronised the device
        if done % cfg.log_every == 0 or done == cfg.steps:
            result.losses.append((done, self.loss_val))
        if self.bar is not None:
            self.bar.update(cfg.tokens_per_step)
            self.bar.set_postfix(loss=f"{self.loss_val:.3f}", refresh=False)
        if self.ckpt is not None and cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
            save_checkpoint(self.ckpt, self.model, self.opt, done, result.losses, self.meta)
        if self.interrupt.hit or (self.stop_after is not None and done - start >= self.stop_after):
            result.status = "interrupted"
            return True
        return False

    def finish(self, stream: TokenStream) -> None:
        """Throughput, the final checkpoint and the validation loss of a run that ended well."""
        cfg, start, result, step = self.cfg, self.start, self.result, self.done
        wall = time.perf_counter() - self.t0
        result.steps, result.tokens = step, step * cfg.tokens_per_step
        result.final_loss, result.wall_s = self.loss_val, round(wall, 3)
        if step > start and wall > 0:
            result.tokens_per_s = round((step - start) * cfg.tokens_per_step / wall, 1)
        if self.t_steady is not None and step - start > STEADY_AFTER:
            steady_wall = (self.t0 + wall) - self.t_steady
            result.steady_tokens_per_s = round((step - start - STEADY_AFTER) * cfg.tokens_per_step / steady_wall, 1)
        if result.status in ("ok", "interrupted") and self.ckpt is not None:
            save_checkpoint(self.ckpt, self.model, self.opt, step, result.losses, self.meta)
        if result.status == "ok":
            batches = stream.val_batches(cfg.batch_size, cfg.val_batches)
            try:
                result.val_loss = evaluate_loss(self.model, batches, cfg, self.device)
            except torch.cuda.OutOfMemoryError as e:
                result.status, result.error_kind, result.error = "infeasible", "oom", _oom_message(e)
            else:  # scoring in the same process measures on the same batches (hlnas.pipeline.run.score_model)
                result.val_batches = batches  # type: ignore[attr-defined]


def _bar(progress: bool, cfg: TrainConfig, start: int):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=cfg.steps * cfg.tokens_per_step, initial=start * cfg.tokens_per_step, unit="tok",
                unit_scale=True, desc="train", dynamic_ncols=True)
