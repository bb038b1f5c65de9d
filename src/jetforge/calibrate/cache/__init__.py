"""TensorRT calibration caches: the text format read and written byte-compatibly (`format`) and the checks of a cache
against its model (`check`)."""
