"""Action-recognition training: the 3D MobileNetV2 recipe (:mod:`.mobilenet3d_recipe`, :mod:`.action3d`,
:mod:`.action3d_int8`) trains the model that ``jetforge app action`` ships (``apps/data/action_mobilenet3d.onnx``), on
clips labelled from real person tracks (:mod:`.track_clips`: the CNN person detector and the tracker of
:mod:`jetforge.vision`, called directly, and a velocity rule)."""
