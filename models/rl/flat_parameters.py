"""A module's parameters and gradients as views into two flat buffers.

A PPO minibatch step of a small MLP is dominated by per-tensor overhead, not arithmetic: torch's
Adam, gradient clipping and zeroing each touch every parameter tensor (13 for the Hopper
actor-critic) with several operator calls. With every parameter a view of one flat tensor and
every gradient a view of another, the optimiser steps one tensor, zeroing is one fill and the
clip is one multiply. Each element sees the same arithmetic as before, so results are the same
bit for bit (tests/test_flat_parameters.py).
"""

from __future__ import annotations

import torch
from torch import nn


class FlatParameters:
    """Lays `module`'s trainable parameters out in one buffer and their gradients in another.

    Call after the module is on its device. The module keeps its Parameter objects (state_dict,
    load_state_dict and forward work as before); their `.data` and `.grad` become views. Give
    `flat` to the optimiser, call `zero_grad` (never the optimiser's or the module's, which
    would detach the gradient views) and `clip_grad_norm_`.
    """

    def __init__(self, module: nn.Module):
        self.params = [p for p in module.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the module has no trainable parameters")
        devices_dtypes = {(p.device, p.dtype) for p in self.params}
        if len(devices_dtypes) != 1:
            raise ValueError(f"parameters span devices or dtypes: {sorted(map(str, devices_dtypes))}")
        first = self.params[0]
        total = sum(p.numel() for p in self.params)
        self.flat = nn.Parameter(torch.empty(total, device=first.device, dtype=first.dtype))
        self.flat.grad = torch.zeros_like(self.flat)
        self.grads: list[torch.Tensor] = []
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                self.flat[offset:offset + n].copy_(p.reshape(-1))
                p.data = self.flat.data[offset:offset + n].view_as(p)
                p.grad = self.flat.grad[offset:offset + n].view_as(p)
                self.grads.append(p.grad)
                offset += n

    def zero_grad(self) -> None:
        """Zero the gradient buffer in place; autograd then adds into the views (0 + g = g)."""
        self.flat.grad.zero_()

    def check_views(self) -> None:
        """Raise if something replaced a parameter's data or gradient (they would stop training)."""
        storage = self.flat.untyped_storage().data_ptr()
        for p, g in zip(self.params, self.grads, strict=True):
            if p.grad is not g or p.untyped_storage().data_ptr() != storage:
                raise RuntimeError("a parameter no longer views the flat buffer (was set_to_none "
                                   "zeroing or .to() called after FlatParameters?)")

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True), with one multiply.

        The total norm is the norm of the per-tensor norms, as torch computes it (a norm of the
        flat buffer would round differently), so the clip coefficient is the same to the bit.
        """
        norms = torch._foreach_norm(self.grads, 2.0)
        total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
        coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
        self.flat.grad.mul_(coef)
        return total


class FlatAdam:
    """torch.optim.Adam(foreach=True) on one flat parameter, the same arithmetic to the bit,
    without torch.optim's per-step Python (hooks, grouping by device): a third of an update's
    time for the Hopper policy. Its state_dict is torch's Adam format, loadable by either."""

    def __init__(self, param: torch.Tensor, lr: float, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999)):
        self.param = param
        self.param_groups = [{"lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0,
                              "amsgrad": False, "maximize": False, "foreach": True, "capturable": False,
                              "differentiable": False, "fused": None, "decoupled_weight_decay": False,
                              "params": [param]}]
        self.step_count: torch.Tensor | None = None
        self.exp_avg: torch.Tensor | None = None
        self.exp_avg_sq: torch.Tensor | None = None

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        grad = self.param.grad
        if self.step_count is None:
            self.step_count = torch.tensor(0.0)
            self.exp_avg = torch.zeros_like(self.param, memory_format=torch.preserve_format)
            self.exp_avg_sq = torch.zeros_like(self.param, memory_format=torch.preserve_format)
        self.step_count += 1  # a float32 CPU tensor, as torch keeps it
        step = self.step_count.item()
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_size = (lr / (1 - beta1 ** step)) * -1
        denom = self.exp_avg_sq.sqrt().div_((1 - beta2 ** step) ** 0.5).add_(eps)
        self.param.addcdiv_(self.exp_avg, denom, value=step_size)

    def state_dict(self) -> dict:
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"} | {"params": [0]}
        state = {} if self.step_count is None else {
            0: {"step": self.step_count.clone(), "exp_avg": self.exp_avg.clone(), "exp_avg_sq": self.exp_avg_sq.clone()}}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state: dict) -> None:
        (group,) = state["param_groups"]
        self.param_groups[0].update({k: v for k, v in group.items() if k != "params"})
        saved = state["state"].get(0)
        if saved is None:
            self.step_count = self.exp_avg = self.exp_avg_sq = None
            return
        if saved["exp_avg"].shape != self.param.shape:
            raise ValueError(f"optimizer state of shape {tuple(saved['exp_avg'].shape)} for a flat "
                             f"parameter of shape {tuple(self.param.shape)}")
        self.step_count = saved["step"].detach().to("cpu", torch.float32).clone()
        self.exp_avg = saved["exp_avg"].to(self.param.device, self.param.dtype).clone()
        self.exp_avg_sq = saved["exp_avg_sq"].to(self.param.device, self.param.dtype).clone()


def flat_adam_state(state: dict, flat: FlatParameters) -> dict:
    """An Adam state dict for `flat.flat`: as saved by an optimiser over the flat buffer, or over
    the module's parameters one by one (checkpoints written before the buffers), concatenated."""
    groups = state["param_groups"]
    ids = [i for group in groups for i in group["params"]]
    if len(ids) == 1:
        return state
    if len(groups) != 1 or len(ids) != len(flat.params):
        raise ValueError(f"optimizer state for {len(ids)} parameters in {len(groups)} groups; this "
                         f"policy has {len(flat.params)} parameters in one group")
    per_param = [state["state"].get(i) for i in ids]
    group = {**groups[0], "params": [0]}
    if all(s is None for s in per_param):  # saved before the first step
        return {"state": {}, "param_groups": [group]}
    if any(s is None for s in per_param) or len({float(s["step"]) for s in per_param}) != 1:
        raise ValueError("optimizer state with parameters at different steps cannot be merged")
    for s, p in zip(per_param, flat.params, strict=True):
        if s["exp_avg"].shape != p.shape:
            raise ValueError(f"optimizer state of shape {tuple(s['exp_avg'].shape)} for a parameter "
                             f"of shape {tuple(p.shape)}")
    merged = {"step": per_param[0]["step"].clone(),
              "exp_avg": torch.cat([s["exp_avg"].reshape(-1) for s in per_param]),
              "exp_avg_sq": torch.cat([s["exp_avg_sq"].reshape(-1) for s in per_param])}
    return {"state": {0: merged}, "param_groups": [group]}
