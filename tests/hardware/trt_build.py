"""Building a test engine with the documented TensorRT API (shared by the hardware and contract tests).

TensorRT is reached through the TensorRT package (its import seam, logger and network flags), as everywhere.
"""


def build_test_engine(onnx_path, engine_path, fp16, max_batch=8, dla_core=None):
    """A TensorRT engine from ``onnx_path`` with a batch profile 1..max_batch (documented TensorRT API)."""
    from jetforge.runtime.tensorrt import compat
    from jetforge.runtime.tensorrt.library import load_tensorrt
    from jetforge.runtime.tensorrt.logger import make_logger

    trt = load_tensorrt()
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(compat.network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(onnx_path.read_bytes()), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if dla_core is not None:
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = dla_core
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
    profile = builder.create_optimization_profile()
    name = network.get_input(0).name
    profile.set_shape(name, (1, 3, 224, 224), (1, 3, 224, 224), (max_batch, 3, 224, 224))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None, "TensorRT could not build the engine"
    engine_path.write_bytes(bytes(plan))
    return engine_path
