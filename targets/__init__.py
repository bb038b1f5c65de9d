"""Target device profiles (Jetson modules, desktop/server GPUs) as validated YAML data.

Imports nothing of jetforge's beyond the root package (errors, config).
"""
