"""DeepStream export: the nvinfer config writer (`config`), the documented nvinfer keys and value types (`keys`) and the
custom bounding-box parser sources (`parsers`)."""
