"""Action-recognition training: the 3D MobileNetV2 recipe (:mod:`.mobilenet3d_recipe`, :mod:`.action3d`,
:mod:`.action3d_int8`) trains the model that ``jetforge app action`` ships (``assets/shipped/action-mobilenet3d/``, made by this recipe on a GPU and measured: its card), on
clips labelled from real person tracks (:mod:`.track_clips`: the CNN person detector and the tracker of
:mod:`jetforge.vision`, called directly, and a velocity rule)."""
