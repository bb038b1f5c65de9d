"""A 3D MobileNetV2 for clips, its 2D weights inflated from ImageNet MobileNetV2.

Architecture: MobileNetV2's inverted-residual blocks (Sandler et al. 2018) with ``Conv3d`` everywhere, as in
the 3D-MobileNetV2 of Kopuklu et al. 2019 ("Resource Efficient 3D Convolutional Neural Networks"):

* stem ``3x3x3`` conv, stride ``(1, 2, 2)``; pointwise convs ``1x1x1``; **depthwise convs ``3x3x3``** (temporal
  kernel 3, the only place the network mixes time besides the stem);
* **time strides**: time is kept at full rate through the stem and the 16- and 24-channel stages, then halved
  together with space at the first block of the 32-, 64- and 160-channel stages (``TIME_STRIDES``).  Why: the
  classes the bundled model is trained on are directions of motion, and a walking person moves a few pixels
  per frame at 10 fps; the early, high-resolution layers are where such small per-frame displacements are
  visible, so they see every frame.  The deep layers carry most of the channels; halving time three times
  there (an 8-frame clip ends at 1 time step, a 16-frame clip at 2) keeps their cost close to the 2D net's
  instead of T times it.  Kopuklu et al. halve time at every spatial downsampling (four times, for 16
  frames); we keep one more stage at full rate because our clips are short (8 frames);
* head: global average pool over (T, H, W), dropout, linear.

Module names follow torchvision's 2D MobileNetV2 (``features.N.conv...``), so the 2D checkpoint maps
onto this net one tensor for one tensor (:func:`inflate_from_2d`).

**Inflation: centre-frame initialisation**, not I3D's "repeat over time and divide by T".  A 2D kernel
``W`` becomes the 3D kernel that is ``W`` at the centre time tap and zero at the others.  With it the
inflated network *is* the ImageNet network applied to each frame (the frames a temporal stride keeps),
exactly, including the first and last frames, where zero padding in time would make the averaged
kernel see a darker frame; a clip of one repeated image gives the 2D network's output bit for bit up to
float rounding (``tests/compress/test_mobilenet3d.py`` checks it with the real weights).  Averaging
would instead start every layer as a temporal blur, which smears the per-frame displacements that
direction-of-motion classes are about; with centre init the off-centre taps start at zero and
training grows them (their gradients are not zero).

Pruned copies keep the module tree and only change channel counts, so :func:`mobilenet3d_from_state`
rebuilds any pruned student from its state dict alone.
"""

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from jetforge.compress.models.mobilenet_v2 import INVERTED_RESIDUAL_SETTING, init_mobilenet_weights, make_divisible
from jetforge.errors import ModelError

#: time stride of each MobileNetV2 stage's first block (the stages of ``INVERTED_RESIDUAL_SETTING``)
TIME_STRIDES = (1, 1, 2, 2, 1, 2, 1)
Stride = Tuple[int, int, int]


class ConvBNReLU6_3d(nn.Sequential):
    """Conv3d (no bias) -> BatchNorm3d -> ReLU6, children named 0, 1, 2 as in torchvision's 2D net."""

    def __init__(self, in_ch: int, out_ch: int, kernel: Tuple[int, int, int] = (3, 3, 3),
                 stride: Stride = (1, 1, 1), groups: int = 1) -> None:
        padding = tuple((k - 1) // 2 for k in kernel)
        super().__init__(nn.Conv3d(in_ch, out_ch, kernel, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm3d(out_ch), nn.ReLU6(inplace=True))


class InvertedResidual3d(nn.Module):
    """Expand (1x1x1) -> depthwise (3x3x3) -> project (1x1x1, linear), with a skip when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, stride: Stride, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(in_ch * expand_ratio))
        self.use_res_connect = stride == (1, 1, 1) and in_ch == out_ch
        layers: List[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6_3d(in_ch, hidden, kernel=(1, 1, 1)))
        layers += [ConvBNReLU6_3d(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv3d(hidden, out_ch, 1, 1, 0, bias=False), nn.BatchNorm3d(out_ch)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNet3D(nn.Module):
    """(N, 3, T, H, W) clip -> (N, classes) logits.  Width 1.0: 2.2 M parameters plus the head."""

    def __init__(self, num_classes: int, width_mult: float = 1.0, dropout: float = 0.2,
                 time_strides: Sequence[int] = TIME_STRIDES) -> None:
        super().__init__()
        if len(time_strides) != len(INVERTED_RESIDUAL_SETTING):
            raise ModelError("time_strides needs one stride per MobileNetV2 stage (%d), got %d"
                             % (len(INVERTED_RESIDUAL_SETTING), len(time_strides)))
        in_ch = make_divisible(32 * width_mult)
        self.last_channel = make_divisible(1280 * max(1.0, width_mult))
        features: List[nn.Module] = [ConvBNReLU6_3d(3, in_ch, stride=(1, 2, 2))]
        for (t, c, n, s), ts in zip(INVERTED_RESIDUAL_SETTING, time_strides):
            out_ch = make_divisible(c * width_mult)
            for i in range(n):
                stride = (ts, s, s) if i == 0 else (1, 1, 1)
                features.append(InvertedResidual3d(in_ch, out_ch, stride, expand_ratio=t))
                in_ch = out_ch
        features.append(ConvBNReLU6_3d(in_ch, self.last_channel, kernel=(1, 1, 1)))
        self.features = nn.Sequential(*features)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        init_mobilenet_weights(self, nn.Conv3d, nn.BatchNorm3d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def inflate_from_2d(model: MobileNet3D, state_2d: Mapping[str, torch.Tensor], load_classifier: bool = False) -> Dict[
        str, int]:
    """Copy a 2D MobileNetV2 state dict into ``model``, every conv kernel inflated by centre-frame init.

    ``load_classifier``: also copy the 1000-class ImageNet head (only when ``model`` has 1000 classes; the
    action head stays freshly initialised otherwise).  Returns counts of what was copied, for the record.
    """
    own = model.state_dict()
    copied = {"conv_inflated": 0, "batchnorm": 0, "classifier": 0}
    new: Dict[str, torch.Tensor] = {}
    for name, value in state_2d.items():
        if name.startswith("classifier") and not load_classifier:
            continue
        if name not in own:
            raise ModelError("the 2D checkpoint has %s, which the 3D MobileNetV2 lacks" % name,
                             hint="inflate torchvision's MobileNetV2 (asset mobilenet_v2_imagenet) at width 1.0")
        target = own[name]
        if value.dim() == 4 and target.dim() == 5:
            kt = target.shape[2]
            kernel = torch.zeros_like(target)
            kernel[:, :, kt // 2] = value
            value = kernel
            copied["conv_inflated"] += 1
        elif name.startswith("classifier"):
            copied["classifier"] += 1
        elif name.endswith("weight"):
            copied["batchnorm"] += 1
        if tuple(value.shape) != tuple(target.shape):
            raise ModelError("%s: 2D shape %s does not inflate to %s" % (name, tuple(value.shape), tuple(target.shape)),
                             hint="inflate at width 1.0 into an unpruned model")
        new[name] = value
    missing = [k for k in own if k not in new and not k.startswith("classifier")]
    if missing:
        raise ModelError("the 2D checkpoint misses %d tensors of the 3D net (%s ...)" % (len(missing), missing[0]),
                         hint="use torchvision's MobileNetV2 ImageNet checkpoint")
    model.load_state_dict(new, strict=False)
    return copied


def mobilenet3d_inflated(num_classes: int, weights: Optional[str] = None, dropout: float = 0.2) -> MobileNet3D:
    """A full-width 3D MobileNetV2 with ImageNet weights inflated into it (``weights``: the 2D ``.pth``;
    default: the ``mobilenet_v2_imagenet`` asset)."""
    if weights is None:
        from jetforge.assets import asset_path

        weights = str(asset_path("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth"))
    state = torch.load(weights, map_location="cpu", weights_only=True)
    model = MobileNet3D(num_classes, dropout=dropout)
    inflate_from_2d(model, state, load_classifier=num_classes == 1000)
    return model


def mobilenet3d_from_state(state: Mapping[str, torch.Tensor], dropout: float = 0.2) -> MobileNet3D:
    """Rebuild a (possibly channel-pruned) MobileNet3D from its state dict: the module tree is the full-width
    one, each conv / norm / linear resized to the tensors' shapes, then the state is loaded strictly."""
    if "classifier.1.weight" not in state:
        raise ModelError("not a MobileNet3D state dict (no classifier.1.weight)",
                         hint="pass a state dict saved from jetforge.compress.models.mobilenet3d.MobileNet3D")
    model = MobileNet3D(int(state["classifier.1.weight"].shape[0]), dropout=dropout)
    for name, module in list(model.named_modules()):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        key = name + ".weight"
        if key not in state:
            continue
        w = state[key]
        if isinstance(module, nn.Conv3d):
            depthwise = module.groups > 1
            cin = w.shape[0] if depthwise else w.shape[1]
            replacement: nn.Module = nn.Conv3d(cin, w.shape[0], module.kernel_size, module.stride, module.padding,
                                               groups=w.shape[0] if depthwise else 1, bias=False)
        elif isinstance(module, nn.BatchNorm3d):
            replacement = nn.BatchNorm3d(w.shape[0])
        elif isinstance(module, nn.Linear):
            replacement = nn.Linear(w.shape[1], w.shape[0])
        else:
            continue
        setattr(parent, child, replacement)
    model.load_state_dict(dict(state), strict=True)
    return model


__all__ = ["MobileNet3D", "TIME_STRIDES", "inflate_from_2d", "mobilenet3d_from_state", "mobilenet3d_inflated"]
