"""Calibration and INT8 evaluation for clip models (3D action models): clip sample sources (`sources`) and the
clip calibration driver (`calibration`)."""
