"""Engine build plans: every TensorRT build decision as plain data, validated before TensorRT is touched.

``plan.make_plan(onnx, target, BuildOptions)`` returns a :class:`~jetforge.runtime.build.plan.BuildPlan`
or raises :class:`jetforge.errors.EngineBuildError` naming the fix; ``sidecar`` writes and reads the
``model.engine.json`` that travels with the plan file.  The thin layer that applies a plan to
TensorRT is :mod:`jetforge.runtime.tensorrt.builder`.
"""
