"""Triton export: the model repository and config.pbtxt writer (`config`) and the SSD postprocessing model
(`ssd_model`)."""
