"""The bundled demos: real models on real video, measured end to end (``jetforge demo``)."""
