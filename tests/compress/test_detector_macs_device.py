"""The detector recipe counts MACs where the model lives (the first GPU run of the recipe crashed after training).

On the H100 the recipe trained both students, wrote student.pt and then failed counting the teacher's MACs: the
teacher was still on the GPU and the count's input on the CPU ("Input type (torch.FloatTensor) and weight type
(torch.cuda.FloatTensor) should be the same").  No GPU here, so the model sits on PyTorch's ``meta`` device, which
has shapes and no data: an input on the wrong device fails the same way, and the count (shapes only) must equal
the CPU count exactly.
"""

import copy

import torch

from jetforge.compress.distill.detection_student import model_macs
from jetforge.compress.models.ssdlite_mobilenet_v2 import SSDLiteMobileNetV2


def test_macs_are_counted_on_the_models_own_device() -> None:
    model = SSDLiteMobileNetV2(num_classes=2, image_size=192).eval()
    on_cpu = model_macs(model, 192)
    elsewhere = copy.deepcopy(model).to("meta")
    assert model_macs(elsewhere, 192) == on_cpu
    assert next(model.parameters()).device == torch.device("cpu")  # the caller's model did not move
