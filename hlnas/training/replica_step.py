"""Training a :class:`~hlnas.training.replicas.ReplicatedLM`: each replica as its solo run would train alone.

* Loss: the sum over replicas of each replica's own loss on its rows (:func:`per_replica`), so each replica's
  gradient is the one its solo run computes.
* Clipping: the solo step clips the global gradient norm of the model to 1.0 (``make_step(clip=1.0)``,
  ``torch.nn.utils.clip_grad_norm_``); here each replica's norm is its own row of the ``[R, N]`` gradient
  (:meth:`ReplicaAdamW.clip_grad_norm_`).
* AdamW: torch.optim.AdamW's update (decoupled decay, bias correction) elementwise on the ``[R, N]`` storage, with
  a ``[R]`` learning-rate tensor (each replica its own peak and schedule), one step counter per replica, and weight
  decay on the columns the solo optimizer decays (``hlnas.training.step.make_optimizer``: matrices not marked
  ``_no_weight_decay``). A replica whose ``active`` flag is off is frozen: weights, moments and step counter stay.
  :meth:`ReplicaAdamW.restart` puts a fresh run (new weights, zero moments, step 0) into a slot;
  :meth:`ReplicaAdamW.slot_state` and :meth:`ReplicaAdamW.load_slot` keep a paused run's row and put it back.

:func:`hlnas.training.step.make_step` takes the replicated model and this optimizer as they are: a loss vector is
summed for backward and returned whole, the optimizer's own clipping replaces torch's, and everything the step reads
(learning rates, flags, counters) is a device tensor, so the step can be captured as one CUDA graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from hlnas.training.replicas import ReplicaError, ReplicatedLM

__all__ = ["ReplicaAdamW", "per_replica"]


def per_replica(loss_fn: Callable[[Tensor, Tensor], Tensor], replicas: int) -> Callable[[Tensor, Tensor], Tensor]:
    """``loss_fn`` applied to each replica's rows: ``(logits [R*B, ...], labels [R*B, ...]) -> [R]`` (the same op on
    the same rows as the solo step, so the same numbers)."""

    def losses(logits: Tensor, labels: Tensor) -> Tensor:
        B = logits.shape[0] // replicas
        return torch.stack([loss_fn(logits[r * B : (r + 1) * B], labels[r * B : (r + 1) * B]) for r in range(replicas)])

    return losses


class ReplicaAdamW:
    """AdamW on a replicated model's ``[R, N]`` storage, one learning rate, step counter and on/off flag per replica.

    The parts of torch's optimizer interface that :func:`hlnas.training.step.make_step`, ``snapshot`` and ``rewind``
    use: ``param_groups`` (capturable), ``state``, ``step()``, ``zero_grad()``, and ``clip_grad_norm_``."""

    def __init__(self, model: ReplicatedLM, lrs: Sequence[float], *, betas=(0.9, 0.98), eps: float = 1e-8,
                 weight_decay: float = 0.1):
        R = model.replicas
        if len(lrs) != R:
            raise ReplicaError(f"ReplicaAdamW: {len(lrs)} learning rates for {R} replicas")
        flat = model.flat
        self.model, self.betas, self.eps = model, (float(betas[0]), float(betas[1])), float(eps)
        self.lr = torch.tensor([float(x) for x in lrs], dtype=flat.dtype, device=flat.device)
        self.active = torch.ones(R, dtype=torch.bool, device=flat.device)
        # float64 counters: the bias corrections 1 - beta**step as torch computes them (in Python floats)
        self.steps = torch.zeros(R, dtype=torch.float64, device=flat.device)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(flat), torch.zeros_like(flat)
        self.wd = model.decays.to(flat.dtype) * float(weight_decay)  # [N]: the solo optimizer's two groups
        self.param_groups = [{"params": [flat], "lr": self.lr, "capturable": True}]
        self.state = {flat: {"step": self.steps, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}}

    # -- what the step calls ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """Scale each replica's gradient row as ``clip_grad_norm_`` scales a solo model's; returns the ``[R]`` norms."""
        g = self.model.flat_grad
        norms = torch.linalg.vector_norm(g, dim=1)
        g.mul_((max_norm / (norms + 1e-6)).clamp(max=1.0)[:, None])
        return norms

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW step of every active replica (torch.optim.AdamW's arithmetic, per replica)."""
        p, g, m, v = self.model.flat, self.model.flat_grad, self.exp_avg, self.exp_avg_sq
        b1, b2 = self.betas
        on = self.active[:, None]
        self.steps.add_(self.active.to(self.steps.dtype))
        lr = self.lr[:, None]
        p_new = p * (1 - lr * self.wd)
        m_new = torch.lerp(m, g, 1 - b1)
        v_new = torch.addcmul(v * b2, g, g, value=1 - b2)
        step_size = (self.lr.double() / (1 - torch.pow(b1, self.steps))).to(p.dtype)[:, None]
        bc2_sqrt = (1 - torch.pow(b2, self.steps)).sqrt().to(p.dtype)[:, None]
        p_new = p_new - step_size * m_new / (v_new.sqrt() / bc2_sqrt + self.eps)
        p.copy_(torch.where(on, p_new, p))
        m.copy_(torch.where(on, m_new, m))
        v.copy_(torch.where(on, v_new, v))

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the gradient storage in place (the parameters' gradients are views of it: never None)."""
        self.model.flat_grad.zero_()

    # -- per replica ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def set_lrs(self, lrs: Sequence[float]) -> None:
        """The learning rate of each replica for the next step (copied into the device tensor the step reads)."""
        self.lr.copy_(torch.tensor([float(x) for x in lrs], dtype=self.lr.dtype), non_blocking=True)

    @torch.no_grad()
    def freeze(self, r: int) -> None:
        """Replica ``r`` takes no more updates (its weights stay as they are)."""
        self.active[r] = False

    @torch.no_grad()
    def restart(self, r: int, model: nn.Module) -> None:
        """Slot ``r`` starts a fresh run: ``model``'s weights, zero moments, step 0, active."""
        self.model.load_replica(r, model)
        self.exp_avg[r].zero_()
        self.exp_avg_sq[r].zero_()
        self.steps[r] = 0
        self.active[r] = True

    def slot_state(self, r: int) -> dict:
        """Replica ``r``'s optimizer state (moments and step counter, on the CPU): what a paused run keeps."""
        row = self.model.row_state  # by parameter name: it continues in a model of another layout set too
        return {"exp_avg": row(r, self.exp_avg[r]), "exp_avg_sq": row(r, self.exp_avg_sq[r]), "step": float(self.steps[r])}

    @torch.no_grad()
    def load_slot(self, r: int, model: nn.Module, state: dict) -> None:
        """Slot ``r`` continues a paused run: ``model``'s weights and the :meth:`slot_state` it kept, active."""
        self.model.load_replica(r, model)
        self.model.load_row_state(r, self.exp_avg[r], state["exp_avg"])
        self.model.load_row_state(r, self.exp_avg_sq[r], state["exp_avg_sq"])
        self.steps[r] = state["step"]
        self.active[r] = True
