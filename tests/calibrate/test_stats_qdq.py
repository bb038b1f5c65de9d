"""Activation statistics against ORT with every output, and the Q/DQ model in ORT and TensorRT-RTX."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402

from jetforge.calibrate import algorithms, stats  # noqa: E402
from jetforge.calibrate.qdq.export import describe_qdq, insert_qdq, save_model, weight_axis  # noqa: E402
from jetforge.calibrate.sources import collect_sources  # noqa: E402
from jetforge.optional import is_available  # noqa: E402


def _batches(real_frames, preprocess, size=5):
    x = np.stack([preprocess.apply(f) for f in real_frames])
    return [x[i:i + size] for i in range(0, len(x), size)], x


def test_tensor_selection(tiny_model):
    m = onnx.load(str(tiny_model))
    q = stats.quantizable_tensors(m)
    conv_inputs = [n.input[0] for n in m.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm")]
    add_inputs = [i for n in m.graph.node if n.op_type == "Add" for i in n.input]
    assert q[0] == "input" and set(conv_inputs) | set(add_inputs) == set(q)
    everything = stats.activation_tensors(m)
    assert set(q) <= set(everything) and "logits" in everything
    weights = {i.name for i in m.graph.initializer}
    assert not weights & set(everything)


def test_streaming_amax_equals_ort_all_outputs(tiny_model, real_frames, preprocess):
    m = onnx.load(str(tiny_model))
    batches, x = _batches(real_frames, preprocess)
    st = stats.collect_from_batches(m, batches)
    assert st.samples == len(x) and st.batches == len(batches)
    # reference: one session with every tensor as an output, over all samples at once
    names = stats.activation_tensors(m)
    full = stats.with_outputs(m, names)
    sess = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))
    outs["input"] = x
    assert set(st.histograms) == set(names)
    for name in names:
        h = st.histograms[name]
        assert h.amax == pytest.approx(float(np.abs(outs[name]).max()), rel=1e-6), name
        assert h.count == outs[name].size
        assert algorithms.compute_amax(h, "max") == h.amax


def _calibrated_qdq(model_path, real_frames, preprocess, tmp_path, method="entropy"):
    m = onnx.load(str(model_path))
    batches, x = _batches(real_frames, preprocess)
    st = stats.collect_from_batches(m, batches, tensors="qdq")
    amax = algorithms.compute_all(st.histograms, method)
    q = insert_qdq(m, amax)
    path = save_model(q, tmp_path / "tiny.qdq.onnx")
    return m, q, path, x


def test_qdq_structure(tiny_model, real_frames, preprocess, tmp_path):
    m, q, path, _ = _calibrated_qdq(tiny_model, real_frames, preprocess, tmp_path)
    info = describe_qdq(q)
    assert info["zero_points_int8_zero"] and info["int32_dequantize"] == []
    assert info["quantize"] == info["dequantize"]
    opset = next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx"))
    assert opset >= 13
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    producers = {o: n for n in q.graph.node for o in n.output}
    orig_weights = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    checked = 0
    for node in q.graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm"):
            continue
        # activation input: per-tensor DQ with a positive scalar scale
        dq_act = producers[node.input[0]]
        assert dq_act.op_type == "DequantizeLinear" and inits[dq_act.input[1]].ndim == 0
        assert inits[dq_act.input[1]] > 0
        # weight: per-channel DQ <- Q <- float weight, scales = max|w| per output channel / 127
        dq_w = producers[node.input[1]]
        q_w = producers[dq_w.input[0]]
        assert dq_w.op_type == "DequantizeLinear" and q_w.op_type == "QuantizeLinear"
        w = inits[q_w.input[0]]
        assert w.dtype == np.float32
        axis = {a.name: a.i for a in q_w.attribute}["axis"]
        trans_b = {a.name: a.i for a in node.attribute}.get("transB", 0)
        assert axis == weight_axis(node.op_type, {"transB": trans_b}, w.ndim)
        assert axis == {"Conv": 0, "ConvTranspose": 1, "Gemm": 0 if trans_b else 1}[node.op_type]
        want = np.moveaxis(np.abs(w), axis, 0).reshape(w.shape[axis], -1).max(1) / 127
        np.testing.assert_allclose(inits[q_w.input[1]], want, rtol=1e-6)
        assert inits[q_w.input[2]].dtype == np.int8 and inits[q_w.input[2]].shape == want.shape
        # bias stays float, straight from an initializer (no INT32 quantization)
        if len(node.input) > 2:
            assert node.input[2] in inits and inits[node.input[2]].dtype == np.float32
            assert node.input[2] not in producers
        checked += 1
    assert checked == 6  # 3 conv + 1 deconv + 2 gemm
    adds = [n for n in q.graph.node if n.op_type == "Add"]
    assert adds and all(producers[i].op_type == "DequantizeLinear" for n in adds for i in n.input)
    assert set(orig_weights)  # sanity: the original model had weights


def test_qdq_runs_in_ort_close_to_fp32(tiny_model, real_frames, preprocess, tmp_path):
    _, _, path, x = _calibrated_qdq(tiny_model, real_frames, preprocess, tmp_path)
    fp32 = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    int8 = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    rel = np.linalg.norm(int8 - fp32) / np.linalg.norm(fp32)
    agree = float(np.mean(int8.argmax(1) == fp32.argmax(1)))
    assert rel < 0.1, rel
    assert agree >= 0.8, agree


@pytest.mark.skipif(not is_available("tensorrt_rtx") and not is_available("tensorrt"),
                    reason="neither TensorRT-RTX nor TensorRT is installed")
def test_qdq_parses_and_builds_with_tensorrt(tiny_model, real_frames, preprocess, tmp_path):
    from jetforge.runtime.tensorrt import check_onnx_builds

    _, _, path, _ = _calibrated_qdq(tiny_model, real_frames, preprocess, tmp_path)
    result = check_onnx_builds(path, prefer="tensorrt_rtx")
    assert result.serialized_bytes > 0 and result.num_layers > 10
    assert result.inputs == {"input": (1, 3, 64, 64)} and result.outputs == ["logits"]


def test_collect_statistics_from_sources(tiny_model, image_dir, preprocess):
    src = collect_sources(image_dir, max_samples=20)
    st = stats.collect_statistics(str(tiny_model), src, preprocess, batch_size=6, total=src.total, progress=False)
    assert st.samples == 20 and st.batches == 4  # 6+6+6+2
    assert st.quality.samples == 20
    assert st.memory_bytes() < 64 * 2048 * 8 * 4


def test_fixed_batch_model_uses_its_batch(fixed_batch_model, image_dir, preprocess):
    model = fixed_batch_model
    src = collect_sources(image_dir, max_samples=5)
    st = stats.collect_statistics(str(model), src, preprocess, batch_size=4, progress=False)
    assert st.samples == 5 and st.batches == 5


def test_shape_mismatch_is_clear(tiny_model, image_dir):
    from jetforge.errors import CalibrationError
    from jetforge.runtime.inputs import Preprocess

    src = collect_sources(image_dir, max_samples=4)
    with pytest.raises(CalibrationError, match="3x32x32 but model input input expects 3x64x64"):
        stats.collect_statistics(str(tiny_model), src, Preprocess(height=32, width=32), progress=False)


# ----------------------------------------------------------------- the pipelined statistics pass
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_pipelined_statistics_equal_a_sequential_pass(tiny_model, real_frames, preprocess, threads):
    """Inference one batch ahead in a thread and histograms on a thread pool give exactly the histograms of
    feeding ORT's outputs (one session, every tensor an output) batch by batch into fresh histograms."""
    from jetforge.calibrate.histogram import StreamingHistogram

    m = onnx.load(str(tiny_model))
    batches, x = _batches(real_frames, preprocess, size=6)
    st = stats.collect_from_batches(m, batches, threads=threads)
    names = stats.activation_tensors(m)
    opts = ort.SessionOptions()  # the statistics pass's settings: basic graph optimizations, its thread count
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.intra_op_num_threads = stats.thread_plan(threads)[0]
    sess = ort.InferenceSession(stats.with_outputs(m, names).SerializeToString(), sess_options=opts,
                                providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    ref = {n: StreamingHistogram() for n in names}
    for b in batches:
        outs = dict(zip(out_names, sess.run(None, {"input": b})), input=b)
        for n in names:
            ref[n].update(outs[n])
    assert list(st.histograms) == names and st.samples == len(x) and st.batches == len(batches)
    for n in names:
        a, b = st.histograms[n], ref[n]
        assert a.width == b.width and np.array_equal(a.counts, b.counts), n
        assert (a.amax, a.min, a.max, a.count) == (b.amax, b.min, b.max, b.count), n


def test_thread_plan_shares_the_cores():
    assert stats.thread_plan(1) == (1, 1)
    assert stats.thread_plan(2) == (1, 2)
    assert stats.thread_plan(16) == (8, 16)


def test_statistics_read_at_most_two_batches_ahead_and_stop_on_errors(tiny_model, real_frames, preprocess):
    import threading

    from jetforge.errors import CalibrationError

    batches, _ = _batches(real_frames, preprocess, size=4)
    read, done = [], []

    def source():
        for i, b in enumerate(batches):
            read.append(i)
            assert len(read) - len(done) <= 2, "read %d batches with %d histogrammed" % (len(read), len(done))
            yield b

    st = stats.collect_from_batches(str(tiny_model), source(), progress=lambda n: done.append(n))
    assert st.batches == len(batches) == len(read) == len(done)

    def failing():
        yield batches[0]
        yield batches[1]
        raise CalibrationError("frame 9 of clip.mp4 could not be decoded")

    with pytest.raises(CalibrationError, match="frame 9 of clip.mp4"):
        stats.collect_from_batches(str(tiny_model), failing())
    # a failing histogram side (here: the progress callback) stops the background thread too
    with pytest.raises(RuntimeError, match="stop"):
        stats.collect_from_batches(str(tiny_model), iter(batches), progress=lambda n: (_ for _ in ()).throw(
            RuntimeError("stop")))
    assert not [t for t in threading.enumerate() if t.name.startswith("jetforge-calibration-prefetch")]


# ----------------------------------------------------------------- plots
def test_plots_overview_and_most_clipped_pages(tiny_model, real_frames, preprocess, tmp_path):
    from jetforge.calibrate.report import most_clipped, plot_histograms, plot_overview

    m = onnx.load(str(tiny_model))
    batches, _ = _batches(real_frames, preprocess)
    st = stats.collect_from_batches(m, batches)
    amax = algorithms.compute_all(st.histograms, "percentile")
    ratio = {n: amax[n] / h.amax for n, h in st.histograms.items() if h.amax > 0}
    picked = most_clipped(st.histograms, amax, count=3)
    assert len(picked) == 3 and set(picked) == set(sorted(ratio, key=lambda n: (ratio[n], n))[:3])
    assert picked == [n for n in st.histograms if n in set(picked)]  # graph order
    overview = plot_overview(st.histograms, amax, tmp_path / "overview.png", title="t")
    image = cv2.imread(str(overview))
    assert image is not None and image.shape[0] > 150 and image.shape[1] == 600  # 7.5 in at 80 dpi
    pages = plot_histograms(st.histograms, amax, tmp_path, names=picked)
    assert [p.name for p in pages] == ["histograms_00.png"] and cv2.imread(str(pages[0])) is not None
    every = plot_histograms(st.histograms, amax, tmp_path / "all", per_page=4)
    assert len(every) == -(-len(st.histograms) // 4)


cv2 = pytest.importorskip("cv2")
