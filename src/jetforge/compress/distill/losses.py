"""Distillation losses and the train module that computes them.

* **Logit distillation** (Hinton et al. 2015): ``KL(softmax(t/T) || softmax(s/T)) * T^2`` (batch mean;
  the ``T^2`` keeps gradient magnitudes comparable across temperatures), mixed with the task
  cross-entropy: ``task_weight * CE + kd_weight * KD``.
* **Feature distillation** (FitNets): for each chosen (student layer, teacher layer) pair a learned
  adapter -- a 1x1 convolution for feature maps, a linear layer for vectors -- maps the student's
  channels to the teacher's; the student map is resized (bilinear) when its spatial size differs;
  loss = mean squared error to the teacher's feature, times the pair's weight.

The teacher is frozen (``requires_grad=False``), always in eval mode (BatchNorm statistics and dropout
fixed even while the student trains), optionally in FP16; it runs under ``torch.no_grad``.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from jetforge.errors import CompressError, UnknownNameError


@dataclass
class FeaturePair:
    """A student layer whose output should imitate a teacher layer's output."""

    student: str
    teacher: str
    weight: float = 1.0


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 4.0) -> torch.Tensor:
    """``KL(softmax(t/T) || softmax(s/T)) * T^2``, averaged over the batch."""
    t = float(temperature)
    log_p_s = nn.functional.log_softmax(student_logits.float() / t, dim=1)
    log_p_t = nn.functional.log_softmax(teacher_logits.float() / t, dim=1)
    return nn.functional.kl_div(log_p_s, log_p_t, reduction="batchmean", log_target=True) * (t * t)


def _find(model: nn.Module, name: str, who: str) -> nn.Module:
    modules = dict(model.named_modules())
    if name not in modules or not name:
        raise UnknownNameError("%s layer" % who, name, [n for n in modules if n],
                               hint="name a module of the %s as printed by print(model), e.g. %s"
                                    % (who, ", ".join([n for n in modules if n][:4])))
    return modules[name]


class _Capture:
    def __init__(self) -> None:
        self.value: Optional[torch.Tensor] = None

    def __call__(self, module, inputs, output) -> None:
        self.value = output[0] if isinstance(output, (tuple, list)) else output


def _adapter(s: torch.Tensor, t: torch.Tensor, where: str) -> nn.Module:
    if s.dim() == 4 and t.dim() == 4:
        return nn.Conv2d(s.shape[1], t.shape[1], 1, bias=False)
    if s.dim() == 2 and t.dim() == 2:
        return nn.Linear(s.shape[1], t.shape[1], bias=False)
    raise CompressError("feature pair %s: student output %s and teacher output %s cannot be matched"
                        % (where, tuple(s.shape), tuple(t.shape)),
                        hint="pair layers whose outputs are both feature maps (N,C,H,W) or both vectors (N,C)")


class DistillModule(nn.Module):
    """``forward(x, y) -> (loss, logs)`` for :class:`jetforge.compress.train.Trainer`."""

    def __init__(self, student: nn.Module, teacher: nn.Module, example: torch.Tensor, task_weight: float = 0.5,
                 kd_weight: float = 0.5, temperature: float = 4.0, features: Sequence[FeaturePair] = (),
                 teacher_fp16: bool = False, label_smoothing: float = 0.0) -> None:
        super().__init__()
        if temperature <= 0:
            raise CompressError("distillation temperature must be positive, got %r" % temperature)
        if task_weight < 0 or kd_weight < 0 or task_weight + kd_weight == 0 and not features:
            raise CompressError("loss weights must be >= 0 and not all zero (task %r, kd %r)" % (task_weight, kd_weight))
        self.student = student
        self.teacher = teacher
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.teacher_dtype = torch.float16 if teacher_fp16 else torch.float32
        self.teacher.to(self.teacher_dtype)
        self.task_weight, self.kd_weight, self.temperature = float(task_weight), float(kd_weight), float(temperature)
        self.label_smoothing = float(label_smoothing)
        self.pairs: List[FeaturePair] = list(features)
        self._s_caps: List[_Capture] = []
        self._t_caps: List[_Capture] = []
        for pair in self.pairs:
            sc, tc = _Capture(), _Capture()
            _find(student, pair.student, "student").register_forward_hook(sc)
            _find(teacher, pair.teacher, "teacher").register_forward_hook(tc)
            self._s_caps.append(sc)
            self._t_caps.append(tc)
        self.adapters = nn.ModuleList()
        self._probe(example)
        self.teacher.eval()

    def train(self, mode: bool = True) -> "DistillModule":
        super().train(mode)
        self.teacher.eval()  # frozen: BN statistics and dropout of the teacher never change
        return self

    def _teacher(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            if self.teacher_dtype == torch.float16 and x.device.type == "cuda":
                with torch.autocast("cuda", enabled=False):
                    return self.teacher(x.to(torch.float16)).float()
            return self.teacher(x.to(self.teacher_dtype)).float()

    def _probe(self, x: torch.Tensor) -> None:
        """Check that teacher and student fit together; build the feature adapters."""
        was = self.student.training
        self.student.eval()
        self.teacher.eval()
        with torch.no_grad():
            try:
                t = self._teacher(x)
            except Exception as err:
                raise CompressError("the teacher does not run on the input (%s): %s" % (tuple(x.shape), err),
                                    hint="teacher and student must take the same input") from err
            try:
                s = self.student(x)
            except Exception as err:
                raise CompressError("the student does not run on the input (%s): %s" % (tuple(x.shape), err)) from err
        self.student.train(was)
        if not isinstance(s, torch.Tensor) or not isinstance(t, torch.Tensor):
            raise CompressError("distillation needs models with one tensor output (logits)")
        if s.shape != t.shape:
            raise CompressError("teacher outputs %s but student outputs %s; logit distillation needs the same "
                                "classes" % (tuple(t.shape), tuple(s.shape)),
                                hint="give a teacher trained on the same label set (same num_classes)")
        for pair, sc, tc in zip(self.pairs, self._s_caps, self._t_caps):
            where = "%s -> %s" % (pair.student, pair.teacher)
            if sc.value is None or tc.value is None:
                raise CompressError("feature pair %s: a layer did not run in forward()" % where)
            self.adapters.append(_adapter(sc.value, tc.value, where))
        self.adapters.to(x.device)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        t_logits = self._teacher(x)
        s_logits = self.student(x)
        task = nn.functional.cross_entropy(s_logits.float(), y, label_smoothing=self.label_smoothing)
        kd = kd_loss(s_logits, t_logits, self.temperature)
        loss = self.task_weight * task + self.kd_weight * kd
        logs = {"task_loss": task.detach(), "kd_loss": kd.detach()}
        if self.pairs:
            feat = torch.zeros((), device=x.device)
            for pair, adapter, sc, tc in zip(self.pairs, self.adapters, self._s_caps, self._t_caps):
                s = adapter(sc.value)
                t = tc.value.float()
                if s.dim() == 4 and s.shape[-2:] != t.shape[-2:]:
                    s = nn.functional.interpolate(s, size=t.shape[-2:], mode="bilinear", align_corners=False)
                feat = feat + pair.weight * nn.functional.mse_loss(s.float(), t)
            loss = loss + feat
            logs["feature_loss"] = feat.detach()
        return loss, logs


__all__ = ["DistillModule", "FeaturePair", "kd_loss"]
