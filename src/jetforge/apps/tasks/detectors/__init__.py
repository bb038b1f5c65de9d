"""Detectors shared by the app tasks (and by training code that needs the same detections): one module each."""
