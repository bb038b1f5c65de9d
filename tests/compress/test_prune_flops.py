"""The MACs counter against independent counts: hand-computed values on small modules, and
``torch.utils.flop_counter.FlopCounterMode`` on CNNs, ViT, Swin, MViT and 3D video models.

FlopCounterMode is a separate implementation (its own op table and formulas); it reports FLOPs,
2 per multiply-accumulate, on the same contractions.  Two settings make it see what jetforge
sees: PyTorch's fused MultiheadAttention fast path is switched off (FlopCounterMode has no
formula for ``aten::_native_multi_head_attention``), and scaled-dot-product attention runs its
math backend (FlopCounterMode has no formula for the CPU flash kernel,
``_scaled_dot_product_flash_attention_for_cpu``, that jetforge counts).  Both counts are exact
integers computed from shapes, so they must agree exactly; no tolerance is needed.
"""

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from jetforge.compress.export import unfused_attention  # noqa: E402
from jetforge.compress.prune import DependencyGraph, apply_plan, class_importance, count_ops, make_plan  # noqa: E402
from jetforge.compress.prune import prune, select  # noqa: E402
from jetforge.compress.prune.flops import estimate  # noqa: E402
from jetforge.errors import CompressError  # noqa: E402

torch.set_num_threads(1)


def reference_macs(model, x):
    """FlopCounterMode's count, halved, with the two settings the module docstring explains."""
    with torch.no_grad(), unfused_attention(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as c:
        model.eval()(x)
    flops = c.get_total_flops()
    assert flops % 2 == 0
    return flops // (2 * x.size(0))


# --- hand-computed values ---------------------------------------------------------------------------------------
class Contractions(nn.Module):
    """One of each contraction jetforge counts, functional and module, with sizes small enough to count by hand."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1, groups=2)
        self.up = nn.ConvTranspose2d(8, 6, 2, stride=2)
        self.norm = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6, 16)
        self.w = nn.Parameter(torch.randn(12, 16))
        self.proj = nn.Parameter(torch.randn(12, 16))
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        y = self.norm(self.up(self.conv(x))).relu()  # [b, 6, 10, 10]
        t = self.fc(y.flatten(2).transpose(1, 2))  # [b, 100, 16]
        u = F.linear(t, self.w)  # [b, 100, 12]
        v = u @ self.proj  # [b, 100, 16]
        q = v[:, :10].reshape(-1, 10, 2, 8).transpose(1, 2)  # [b, 2 heads, 10, 8]
        k = v[:, 10:30].reshape(-1, 20, 2, 8).transpose(1, 2)  # [b, 2, 20, 8]
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k)  # [b, 2, 10, 20]
        o = F.scaled_dot_product_attention(q, k, k[..., :4])  # value head dim 4
        seq = v[:, :5, :8]
        a, _ = self.attn(seq, seq, seq, need_weights=False)
        return scores.mean() + o.mean() + a.mean()


HAND = {
    "conv": 8 * 5 * 5 * (4 // 2) * 9,  # output elements x (in / groups) x kernel
    "up": 8 * 5 * 5 * 6 * 4,  # transposed: input elements x (out / groups) x kernel
    "fc": 100 * 6 * 16,
    "": 100 * 16 * 12 + 100 * 12 * 16 + 2 * 10 * 20 * 8 + 2 * 10 * 20 * (8 + 4),  # F.linear, @, einsum, SDPA
    # self-attention over 5 tokens of width 8, 2 heads of 4: q/k/v and output projections, QK^T and AV
    "attn": 3 * 5 * 8 * 8 + 5 * 8 * 8 + 2 * 5 * 5 * 4 * 2,
}


def test_hand_counted_contractions_per_module_and_per_sample():
    model = Contractions().eval()
    for batch in (1, 3):
        x = torch.randn(batch, 4, 5, 5)
        count = count_ops(model, x)
        assert count.per_layer == HAND, batch  # counts are per sample, whatever the batch
        assert count.macs == sum(HAND.values()) == reference_macs(model, x)
        assert count.flops == 2 * count.macs
        assert count.params == sum(p.numel() for p in model.parameters())


def test_norms_activations_pooling_and_elementwise_cost_no_macs():
    model = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2), nn.GroupNorm(1, 3), nn.LayerNorm(4),
                          nn.Softmax(-1), nn.Dropout()).eval()
    assert count_ops(model, torch.randn(2, 3, 8, 8)).macs == 0


class FusedAttention(nn.Module):
    """Calls PyTorch's fused attention op directly, as its fast path does."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        m = self.mha
        return torch._native_multi_head_attention(x, x, x, 8, 2, m.in_proj_weight, m.in_proj_bias,
                                                  m.out_proj.weight, m.out_proj.bias, need_weights=False)[0]


def test_the_fused_attention_op_counts_as_its_unfused_parts():
    x = torch.randn(1, 5, 8)
    fused = count_ops(FusedAttention().eval(), x)
    assert fused.macs == HAND["attn"] and set(fused.per_op) == {"_native_multi_head_attention"}
    # the fast path is off while counting, so the module itself is seen as matmuls and attention
    plain = count_ops(FusedAttention().mha.eval(), (x, x, x))
    assert plain.macs == HAND["attn"] and "_native_multi_head_attention" not in plain.per_op
    assert torch.backends.mha.get_fastpath_enabled()  # and the global setting is back afterwards


def test_fused_scaled_dot_product_attention_counts_as_the_math_path():
    """Whichever kernel PyTorch picks for this CPU (a fused one where it has it), the count is the same."""
    q, k, v = torch.randn(2, 3, 7, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8)

    class Sdpa(nn.Module):
        def forward(self, x):
            return F.scaled_dot_product_attention(x, k, v)

    chosen = count_ops(Sdpa(), q)
    with sdpa_kernel(SDPBackend.MATH):
        math = count_ops(Sdpa(), q)
    assert math.per_op == {"bmm": 3 * 7 * 9 * (8 + 8)}  # per sample: 3 heads, 7 queries, 9 keys
    assert chosen.macs == math.macs


# --- real architectures against FlopCounterMode --------------------------------------------------------------------
def small_vit():
    return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                hidden_dim=32, mlp_dim=64, num_classes=10)


def small_mvit():
    from torchvision.models.video.mvit import MSBlockConfig, MViT

    def block(heads, cin, cout, stride_q, stride_kv):
        return MSBlockConfig(num_heads=heads, input_channels=cin, output_channels=cout, kernel_q=[3, 3, 3],
                             kernel_kv=[3, 3, 3], stride_q=stride_q, stride_kv=stride_kv)
    blocks = [block(1, 16, 16, [1, 1, 1], [1, 2, 2]), block(2, 16, 32, [1, 2, 2], [1, 1, 1]),
              block(2, 32, 32, [1, 1, 1], [1, 1, 1])]
    return MViT(spatial_size=(32, 32), temporal_size=4, block_setting=blocks, residual_pool=True,
                residual_with_cls_embed=False, rel_pos_embed=True, proj_after_attn=True, num_classes=10)


def small_swin():
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           num_classes=10)


def small_swin3d():
    """A window as long as the clip's 2 patch steps: torchvision then shrinks the window in place (what the
    pruner's trace used to break on: fx hands read-only argument lists)."""
    from torchvision.models.video.swin_transformer import SwinTransformer3d

    return SwinTransformer3d(patch_size=[2, 4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                             window_size=[2, 4, 4], num_classes=10)


MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (1, 3, 64, 64)),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10), (2, 3, 64, 64)),
    "vit": (small_vit, (1, 3, 32, 32)),
    "swin_t": (lambda: torchvision.models.swin_t(num_classes=10), (1, 3, 64, 64)),
    "mvit": (small_mvit, (1, 3, 4, 32, 32)),
    "r2plus1d_18": (lambda: torchvision.models.video.r2plus1d_18(num_classes=10), (1, 3, 4, 32, 32)),
    "swin3d_t": (lambda: torchvision.models.video.swin3d_t(num_classes=10), (1, 3, 4, 32, 32)),
    "small_swin3d": (small_swin3d, (1, 3, 4, 32, 32)),
}


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"small_swin3d"}))
def test_count_matches_flop_counter_on_real_architectures(name):
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(shape)
    count = count_ops(model, x)
    assert count.macs == reference_macs(model, x)
    assert sum(count.per_op.values()) == count.macs


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "vit", "mvit", "small_swin3d"])
def test_the_search_estimate_is_the_count_after_pruning(name):
    """The goal search scales traced layers' MACs and keeps the rest (attention): exact, attention included."""
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(shape)
    graph = DependencyGraph.build(model, x)
    removed = select(graph, class_importance(graph, model, "l1"), 0.5, round_to=8)
    before = count_ops(model, x)
    predicted = estimate(graph, model, before, removed)
    apply_plan(model, make_plan(graph, model, removed))
    after = count_ops(model, x)
    assert predicted.macs == after.macs == reference_macs(model, x) < before.macs
    assert predicted.params == after.params


def test_a_macs_goal_out_of_reach_names_the_true_reduction():
    """A ViT's attention stays whole, so a 2x MACs cut is impossible here; the error says what is possible."""
    torch.manual_seed(0)
    with pytest.raises(CompressError, match=r"2.00x macs reduction is out of reach.*gives 1\.[0-4]\d*x"):
        prune(small_vit().eval(), torch.randn(1, 3, 32, 32), flops_reduction=2.0)
