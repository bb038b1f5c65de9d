"""The TensorRT session's execution contexts, on the CPU: which context serves a key, when one is made or re-bound,
how many a session keeps, and which TensorRT calls give them one shared activation memory, per version.

The versions are the stand-ins of tests/standins/tensorrt_versions_standin.py: each exposes only what that TensorRT
has (8.5/8.6, 10.0, 10.1+, and a build with none of it).  The TensorRT calls themselves are written against
TensorRT's documented API and not executed here.
"""

import pytest

from jetforge.runtime.cuda.policy import GraphPolicy
from jetforge.runtime.tensorrt.context_pool import (DEFAULT_MAX_GRAPHS, ContextPool, Slot, choose_scratch_api,
                                                    create_context, give_scratch, plan_contexts, scratch_bytes)
from tests.standins.tensorrt_versions_standin import DEVICE_MEMORY, make_trt

SCRATCH = 0x7F0000100000  # a cudaMalloc-like address


# -- the version-dependent calls --------------------------------------------------------------------------------
@pytest.mark.parametrize("version,create,size,setter,made", [
    ("8.5", "without_device_memory", "device_memory_size", "device_memory", "without_device_memory"),
    ("8.6", "without_device_memory", "device_memory_size", "device_memory", "without_device_memory"),
    ("10.0", "strategy", "device_memory_size", "device_memory", "USER_MANAGED"),
    ("10.1", "strategy", "device_memory_size_v2", "set_device_memory", "USER_MANAGED"),
])
def test_each_version_gets_its_own_calls_for_one_shared_memory(version, create, size, setter, made):
    trt = make_trt(version)
    engine = trt.Runtime(None).deserialize_cuda_engine(b"")
    api = choose_scratch_api(trt, engine)
    assert (api.create, api.size, api.setter) == (create, size, setter) and api.shared
    ctx = create_context(trt, engine, api)
    assert engine.created == [made] and ctx.user_managed
    assert scratch_bytes(engine, api) == DEVICE_MEMORY
    give_scratch(ctx, api, SCRATCH, DEVICE_MEMORY)
    assert ctx.calls == [("device_memory", SCRATCH, DEVICE_MEMORY)] and ctx.memory == (SCRATCH, DEVICE_MEMORY)
    assert engine.deprecated_reads == 0  # 10.1+: the deprecated device_memory_size is never read
    assert "shared: one %d-byte scratch" % DEVICE_MEMORY in api.describe(DEVICE_MEMORY)


def test_10_1_hands_memory_over_with_its_size_and_8x_through_the_property():
    new, old = make_trt("10.1"), make_trt("8.6")
    assert hasattr(new.IExecutionContext, "set_device_memory")
    assert not hasattr(old.IExecutionContext, "set_device_memory") and hasattr(old.IExecutionContext, "device_memory")
    ctx = old.IExecutionContext(old.Runtime(None).deserialize_cuda_engine(b""), True)
    with pytest.raises(AttributeError):
        ctx.device_memory  # write-only, as TensorRT's: why the choice looks at the class, not at an instance


def test_without_the_shared_memory_calls_each_context_allocates_its_own_and_says_why():
    trt = make_trt("none")
    engine = trt.Runtime(None).deserialize_cuda_engine(b"")
    api = choose_scratch_api(trt, engine)
    assert not api.shared
    ctx = create_context(trt, engine, api)
    assert engine.created == ["default"] and not ctx.user_managed
    said = api.describe(None)
    assert said.startswith("own (this TensorRT has no ") and "each context allocates its own" in said
    assert "USER_MANAGED" in said and "set_device_memory" in said


def test_a_module_missing_only_the_setter_does_not_share():
    trt = make_trt("10.1")
    trt.IExecutionContext = object  # a class with neither set_device_memory nor device_memory
    api = choose_scratch_api(trt, trt.Runtime(None).deserialize_cuda_engine(b""))
    assert not api.shared and "set_device_memory / device_memory" in api.missing


# -- how many contexts ------------------------------------------------------------------------------------------
def test_plan_gpu_graphs_keep_eight_contexts_and_four_captures_each():
    plan = plan_contexts(True, None, DEFAULT_MAX_GRAPHS)
    assert (plan.max_contexts, plan.max_captures, plan.share_memory) == (8, 32, True)
    assert DEFAULT_MAX_GRAPHS >= 6  # the apps' batch buckets (1, 2, 4, 8, 16, 32)


@pytest.mark.parametrize("enabled,dla,why", [(True, 0, "DLA"), (False, 1, "DLA"), (False, None, "graphs are off")])
def test_plan_dla_or_graphs_off_keep_one_context_with_its_own_memory(enabled, dla, why):
    plan = plan_contexts(enabled, dla, 8)
    assert (plan.max_contexts, plan.max_captures, plan.share_memory) == (1, 16, False) and why in plan.why


# -- the pool -------------------------------------------------------------------------------------------------
class Made:
    """Slots with a name, made on demand; ``limit`` makes TensorRT refuse (None) after that many."""

    def __init__(self, limit=99):
        self.count, self.limit = 0, limit

    def __call__(self):
        if self.count >= self.limit:
            return None
        self.count += 1
        return Slot("ctx%d" % self.count, None)


def test_a_known_key_keeps_its_context_and_new_keys_get_new_ones_up_to_the_limit():
    made = Made()
    pool = ContextPool(Slot("primary", None), made, 3)
    a, evicted = pool.acquire("a")
    assert a.context == "primary" and evicted == [] and a.key == "a"  # the primary serves the first key
    b, _ = pool.acquire("b")
    c, _ = pool.acquire("c")
    assert (b.context, c.context, made.count, len(pool)) == ("ctx1", "ctx2", 2, 3)
    for key, slot in (("a", a), ("c", c), ("b", b), ("a", a)):
        assert pool.acquire(key) == (slot, [])


def test_the_least_recently_used_key_gives_its_context_up_and_only_that_key():
    pool = ContextPool(Slot("primary", None), Made(), 2)
    a, _ = pool.acquire("a")
    pool.acquire("b")
    pool.acquire("a")  # b is now the least recently used
    c, evicted = pool.acquire("c")
    assert evicted == ["b"] and c.context == "ctx1" and c.key == "c"  # b's context, re-bound: no new one
    assert pool.keys() == ["a", "c"] and len(pool) == 2
    assert pool.acquire("a") == (a, [])


def test_a_context_tensorrt_cannot_make_caps_the_pool_instead_of_failing():
    pool = ContextPool(Slot("primary", None), Made(limit=1), 8)
    pool.acquire("a")
    pool.acquire("b")
    slot, evicted = pool.acquire("c")  # TensorRT returned None: re-use the least recently used context
    assert evicted == ["a"] and slot.context == "primary" and pool.refused == 1 and pool.max_contexts == 2


def test_collapse_keeps_the_primary_for_plain_enqueue_and_returns_the_rest():
    primary = Slot("primary", None)
    pool = ContextPool(primary, Made(), 8)
    for key in "abcd":
        pool.acquire(key)
    dropped = pool.collapse()
    assert sorted(s.context for s in dropped) == ["ctx1", "ctx2", "ctx3"] and len(pool) == 1
    slot, evicted = pool.acquire("e")
    assert slot is primary and evicted == []
    slot, evicted = pool.acquire("f")  # one context from now on: every new key re-binds it
    assert slot is primary and evicted == ["e"]


def test_the_pool_and_the_graph_policy_agree_on_which_graphs_live():
    """The session discards a key's graph when the pool re-binds its context: the policy never holds a graph whose
    context serves another key (the policy evicts nothing itself)."""
    pool, policy = ContextPool(Slot("primary", None), Made(), 2), GraphPolicy(True, max_graphs=2, max_captures=99)
    for key in ["a", "b", "a", "c", "b", "c", "a"]:
        slot, evicted = pool.acquire(key)
        policy.discard(evicted)
        if policy.decide(key) == "capture":
            assert policy.captured(key) == []
        assert set(policy.live_keys) <= set(pool.keys())
    assert policy.discard(["zz"]) == []
