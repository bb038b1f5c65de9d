"""The documented keys of DeepStream's ``nvinfer`` and ``deepstream-app`` configuration files, with value types.

Sources (the key names, their value types and their documented ranges):

* ``nvinfer``: NVIDIA DeepStream developer guide, "Gst-nvinfer", section "Gst-nvinfer File Configuration
  Specifications" (tables of the ``[property]`` group's keys and of the ``[class-attrs-...]`` groups' keys),
  :data:`NVINFER_DOC`; and the reader the plugin uses, ``gstnvinfer_property_parser.cpp`` of the DeepStream
  SDK sources: which ``g_key_file_get_*`` reads a key decides the type checked here.
* ``deepstream-app``: NVIDIA DeepStream developer guide, "DeepStream Reference Application -
  deepstream-app", section "Configuration Groups", :data:`DEEPSTREAM_APP_DOC`.

For ``nvinfer`` the table is the documented list of DeepStream 6.x/7.x and an unknown key is an error:
nvinfer itself only prints "Unknown or legacy key" and carries on, which is how a typo goes unnoticed.
For ``deepstream-app`` only the keys jetforge writes and common additions are listed (its sink,
tracker and message-broker groups have dozens more); an unlisted key there is reported as a note.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from jetforge.deploy.keyfile import KeyFile, KeyFileError

NVINFER_DOC = "https://docs.nvidia.com/metropolis/deepstream/dev-guide/text/DS_plugin_gst-nvinfer.html"
DEEPSTREAM_APP_DOC = "https://docs.nvidia.com/metropolis/deepstream/dev-guide/text/DS_ref_app_deepstream.html"

# value types, named after the GLib getter nvinfer/deepstream-app use for the key
INT, DOUBLE, BOOL, STRING, INT_LIST, DOUBLE_LIST, STRING_LIST = (
    "integer", "double", "boolean", "string", "integer list", "double list", "string list")


@dataclass(frozen=True)
class KeySpec:
    """One documented key: its value type, and the documented allowed values or range."""

    type: str
    choices: Optional[Tuple[int, ...]] = None
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    length: Optional[Tuple[int, int]] = None  # allowed list lengths (inclusive)
    meaning: str = ""


K = KeySpec
# [property] group of nvinfer (gstnvinfer_property_parser.cpp; ranges as the parser checks them)
NVINFER_PROPERTY: Dict[str, KeySpec] = {
    "gpu-id": K(INT, minimum=0), "gie-unique-id": K(INT, minimum=1, meaning="unique id (> 0)"),
    "process-mode": K(INT, choices=(1, 2), meaning="1 primary (full frame), 2 secondary (objects)"),
    "interval": K(INT, minimum=0, meaning="frames skipped between inferences"),
    "labelfile-path": K(STRING), "custom-lib-path": K(STRING), "onnx-file": K(STRING),
    "model-engine-file": K(STRING), "int8-calib-file": K(STRING), "model-file": K(STRING),
    "proto-file": K(STRING), "uff-file": K(STRING), "tlt-encoded-model": K(STRING), "tlt-model-key": K(STRING),
    "mean-file": K(STRING), "custom-network-config": K(STRING), "uff-input-blob-name": K(STRING),
    "batch-size": K(INT, minimum=1, maximum=1024), "workspace-size": K(INT, minimum=0, meaning="MiB"),
    "network-mode": K(INT, choices=(0, 1, 2, 3), meaning="0 FP32, 1 INT8, 2 FP16 (3 BEST, DeepStream 6.2+)"),
    "network-type": K(INT, choices=(0, 1, 2, 3, 100),
                      meaning="0 detector, 1 classifier, 2 segmentation, 3 instance segmentation, 100 other"),
    "is-classifier": K(BOOL, meaning="legacy; network-type replaces it"),
    "model-color-format": K(INT, choices=(0, 1, 2), meaning="0 RGB, 1 BGR, 2 GRAY"),
    "net-scale-factor": K(DOUBLE, meaning="y = net-scale-factor * (x - offsets[c])"),
    "offsets": K(DOUBLE_LIST, length=(1, 4), meaning="per-channel mean subtracted before scaling"),
    "infer-dims": K(INT_LIST, length=(3, 3), meaning="C;H;W"),
    "input-dims": K(INT_LIST, length=(4, 4), meaning="legacy C;H;W;order"),
    "uff-input-dims": K(INT_LIST, length=(4, 4), meaning="legacy C;H;W;order"),
    "uff-input-order": K(INT, choices=(0, 1, 2)), "network-input-order": K(INT, choices=(0, 1)),
    "force-implicit-batch-dim": K(BOOL), "enable-dla": K(BOOL), "use-dla-core": K(INT, minimum=0),
    "output-blob-names": K(STRING_LIST), "output-io-formats": K(STRING_LIST),
    "layer-device-precision": K(STRING_LIST),
    "parse-bbox-func-name": K(STRING), "parse-bbox-instance-mask-func-name": K(STRING),
    "parse-classifier-func-name": K(STRING), "engine-create-func-name": K(STRING),
    "num-detected-classes": K(INT, minimum=0),
    "cluster-mode": K(INT, choices=(0, 1, 2, 3, 4),
                      meaning="0 group rectangles, 1 DBSCAN, 2 NMS, 3 DBSCAN+NMS, 4 none"),
    "enable-dbscan": K(BOOL, meaning="legacy; cluster-mode replaces it"),
    "classifier-threshold": K(DOUBLE, minimum=0.0), "classifier-async-mode": K(BOOL),
    "classifier-type": K(STRING), "segmentation-threshold": K(DOUBLE, minimum=0.0),
    "segmentation-output-order": K(INT, choices=(0, 1)),
    "output-tensor-meta": K(BOOL), "output-instance-mask": K(BOOL), "input-tensor-from-meta": K(BOOL),
    "tensor-meta-pool-size": K(INT, minimum=1), "secondary-reinfer-interval": K(INT, minimum=0),
    "maintain-aspect-ratio": K(BOOL), "symmetric-padding": K(BOOL),
    "input-object-min-width": K(INT, minimum=0), "input-object-min-height": K(INT, minimum=0),
    "input-object-max-width": K(INT, minimum=0), "input-object-max-height": K(INT, minimum=0),
    "operate-on-gie-id": K(INT), "operate-on-class-ids": K(INT_LIST), "filter-out-class-ids": K(INT_LIST),
    "scaling-filter": K(INT, choices=(0, 1, 2, 3, 4, 5, 6),
                        meaning="NvBufSurfTransform_Inter: 0 nearest, 1 bilinear, 2-5 algo 1-4, 6 default"),
    "scaling-compute-hw": K(INT, choices=(0, 1, 2), meaning="0 default, 1 GPU, 2 VIC (Jetson)"),
    "crop-objects-to-roi-boundary": K(BOOL), "dump-input-tensor": K(BOOL), "dump-output-tensor": K(BOOL),
    "disable-output-host-copy": K(BOOL), "auto-inc-mem": K(BOOL), "max-gpu-mem-per": K(INT, minimum=0, maximum=100),
}

# [class-attrs-all] and [class-attrs-<id>] groups (detectors)
NVINFER_CLASS_ATTRS: Dict[str, KeySpec] = {
    "threshold": K(DOUBLE, minimum=0.0, meaning="legacy; pre-cluster-threshold replaces it"),
    "pre-cluster-threshold": K(DOUBLE, minimum=0.0), "post-cluster-threshold": K(DOUBLE, minimum=0.0),
    "eps": K(DOUBLE, minimum=0.0), "group-threshold": K(INT, minimum=0), "minBoxes": K(INT, minimum=0),
    "dbscan-min-score": K(DOUBLE, minimum=0.0), "nms-iou-threshold": K(DOUBLE, minimum=0.0, maximum=1.0),
    "topk": K(INT, minimum=0), "roi-top-offset": K(INT, minimum=0), "roi-bottom-offset": K(INT, minimum=0),
    "detected-min-w": K(INT, minimum=0), "detected-min-h": K(INT, minimum=0),
    "detected-max-w": K(INT, minimum=0), "detected-max-h": K(INT, minimum=0),
    "border-color": K(DOUBLE_LIST, length=(4, 4), meaning="r;g;b;a in [0, 1]"),
    "bg-color": K(DOUBLE_LIST, length=(4, 4), meaning="r;g;b;a in [0, 1]"),
}

# deepstream-app groups jetforge writes (a group name ending in a number takes the table of its prefix)
DEEPSTREAM_APP: Dict[str, Dict[str, KeySpec]] = {
    "application": {"enable-perf-measurement": K(BOOL), "perf-measurement-interval-sec": K(INT, minimum=1),
                    "gie-kitti-output-dir": K(STRING)},
    "tiled-display": {"enable": K(INT, choices=(0, 1, 2)), "rows": K(INT, minimum=1), "columns": K(INT, minimum=1),
                      "width": K(INT, minimum=1), "height": K(INT, minimum=1), "gpu-id": K(INT, minimum=0),
                      "nvbuf-memory-type": K(INT, choices=(0, 1, 2, 3))},
    "source": {"enable": K(BOOL), "type": K(INT, choices=(1, 2, 3, 4, 5, 6),
                                            meaning="1 camera (V4L2), 2 URI, 3 multi-URI, 4 RTSP, 5 camera (CSI)"),
               "uri": K(STRING), "num-sources": K(INT, minimum=1), "gpu-id": K(INT, minimum=0),
               "cudadec-memtype": K(INT, choices=(0, 1, 2)), "camera-width": K(INT, minimum=1),
               "camera-height": K(INT, minimum=1), "camera-fps-n": K(INT, minimum=1), "camera-fps-d": K(INT, minimum=1),
               "camera-csi-sensor-id": K(INT, minimum=0), "camera-v4l2-dev-node": K(INT, minimum=0),
               "drop-frame-interval": K(INT, minimum=0), "latency": K(INT, minimum=0),
               "nvbuf-memory-type": K(INT, choices=(0, 1, 2, 3))},
    "streammux": {"gpu-id": K(INT, minimum=0), "live-source": K(BOOL), "batch-size": K(INT, minimum=1),
                  "batched-push-timeout": K(INT, minimum=-1), "width": K(INT, minimum=1), "height": K(INT, minimum=1),
                  "enable-padding": K(BOOL), "nvbuf-memory-type": K(INT, choices=(0, 1, 2, 3)),
                  "attach-sys-ts-as-ntp": K(BOOL)},
    "primary-gie": {"enable": K(BOOL), "gpu-id": K(INT, minimum=0), "batch-size": K(INT, minimum=1),
                    "gie-unique-id": K(INT, minimum=1), "interval": K(INT, minimum=0), "config-file": K(STRING),
                    "model-engine-file": K(STRING), "labelfile-path": K(STRING), "nvbuf-memory-type":
                    K(INT, choices=(0, 1, 2, 3)), "bbox-border-color0": K(DOUBLE_LIST, length=(4, 4))},
    "osd": {"enable": K(BOOL), "gpu-id": K(INT, minimum=0), "border-width": K(INT, minimum=0),
            "text-size": K(INT, minimum=1), "text-color": K(DOUBLE_LIST, length=(4, 4)),
            "text-bg-color": K(DOUBLE_LIST, length=(4, 4)), "font": K(STRING), "show-clock": K(BOOL),
            "process-mode": K(INT, choices=(0, 1, 2)), "nvbuf-memory-type": K(INT, choices=(0, 1, 2, 3))},
    "sink": {"enable": K(BOOL), "type": K(INT, choices=(1, 2, 3, 4, 5, 6),
                                          meaning="1 fakesink, 2 EGL window, 3 file, 4 RTSP, 5 overlay (Jetson), "
                                                  "6 message broker"),
             "sync": K(BOOL), "source-id": K(INT, minimum=0), "gpu-id": K(INT, minimum=0),
             "container": K(INT, choices=(1, 2), meaning="1 MP4, 2 MKV"),
             "codec": K(INT, choices=(1, 2, 3), meaning="1 H.264, 2 H.265, 3 MPEG-4"),
             "enc-type": K(INT, choices=(0, 1), meaning="0 hardware, 1 software"), "bitrate": K(INT, minimum=1),
             "output-file": K(STRING), "qos": K(BOOL), "nvbuf-memory-type": K(INT, choices=(0, 1, 2, 3))},
    "tests": {"file-loop": K(BOOL)},
}


def _check_value(kf: KeyFile, group: str, key: str, spec: KeySpec) -> Optional[str]:
    """One line saying why ``group/key``'s value does not read as ``spec`` says, or None."""
    try:
        if spec.type == INT:
            values: Sequence[float] = [kf.get_integer(group, key)]
        elif spec.type == DOUBLE:
            values = [kf.get_double(group, key)]
        elif spec.type == BOOL:
            kf.get_boolean(group, key)
            values = []
        elif spec.type == STRING:
            if not kf.get_string(group, key):
                return "[%s] %s is empty" % (group, key)
            values = []
        elif spec.type == INT_LIST:
            values = kf.get_integer_list(group, key)
        elif spec.type == DOUBLE_LIST:
            values = kf.get_double_list(group, key)
        else:
            values = []
            if not kf.get_string_list(group, key):
                return "[%s] %s is an empty list" % (group, key)
    except KeyFileError as err:
        return err.message
    if spec.length is not None and spec.type in (INT_LIST, DOUBLE_LIST):
        lo, hi = spec.length
        if not lo <= len(values) <= hi:
            return "[%s] %s has %d values; the documentation allows %s" % (
                group, key, len(values), lo if lo == hi else "%d to %d" % (lo, hi))
    for v in values:
        if spec.choices is not None and v not in spec.choices:
            return "[%s] %s=%s is not one of %s (%s)" % (group, key, v, ", ".join(map(str, spec.choices)), spec.meaning)
        if spec.minimum is not None and v < spec.minimum:
            return "[%s] %s=%s is below the documented minimum %s" % (group, key, v, spec.minimum)
        if spec.maximum is not None and v > spec.maximum:
            return "[%s] %s=%s is above the documented maximum %s" % (group, key, v, spec.maximum)
    return None


def _check_group(kf: KeyFile, group: str, table: Dict[str, KeySpec], unknown_is_error: bool,
                 problems: List[str], notes: List[str]) -> None:
    for key in kf.groups[group]:
        spec = table.get(key)
        if spec is None:
            (problems if unknown_is_error else notes).append("[%s] %s is not a documented key" % (group, key))
            continue
        why = _check_value(kf, group, key, spec)
        if why:
            problems.append(why)


def validate_nvinfer(kf: KeyFile) -> List[str]:
    """Every problem of an nvinfer configuration against the documented keys (empty: valid)."""
    problems: List[str] = []
    if "property" not in kf.groups:
        return ["the nvinfer configuration has no [property] group (nvinfer requires it)"]
    _check_group(kf, "property", NVINFER_PROPERTY, True, problems, [])
    for group in kf.groups:
        if group == "property":
            continue
        if group == "class-attrs-all" or (group.startswith("class-attrs-") and group[12:].isdigit()):
            _check_group(kf, group, NVINFER_CLASS_ATTRS, True, problems, [])
        else:
            problems.append("[%s] is not an nvinfer group ([property], [class-attrs-all], [class-attrs-N])" % group)
    prop = kf.groups["property"]
    if not problems and "onnx-file" not in prop and "model-engine-file" not in prop:
        problems.append("[property] names neither onnx-file nor model-engine-file: nvinfer has no model")
    if not problems and prop.get("network-mode", "").strip() == "1" and "int8-calib-file" not in prop \
            and "model-engine-file" not in prop:
        problems.append("[property] network-mode=1 (INT8) needs int8-calib-file to build the engine")
    return problems


def app_group_table(group: str) -> Optional[Dict[str, KeySpec]]:
    """The key table of a deepstream-app group (``source0`` -> ``source``), or None for a group not listed."""
    if group in DEEPSTREAM_APP:
        return DEEPSTREAM_APP[group]
    base = group.rstrip("0123456789")
    return DEEPSTREAM_APP.get(base) if base != group and base in ("source", "sink") else None


def validate_deepstream_app(kf: KeyFile) -> Tuple[List[str], List[str]]:
    """(problems, notes) of a deepstream-app configuration: typed values of the listed keys, required groups."""
    problems: List[str] = []
    notes: List[str] = []
    for group in kf.groups:
        table = app_group_table(group)
        if table is None:
            notes.append("[%s] is not a group jetforge checks" % group)
            continue
        _check_group(kf, group, table, False, problems, notes)
    for required in ("application", "streammux", "primary-gie"):
        if required not in kf.groups:
            problems.append("the deepstream-app configuration has no [%s] group" % required)
    if not any(g.startswith("source") for g in kf.groups):
        problems.append("the deepstream-app configuration has no [sourceN] group")
    if not any(g.startswith("sink") for g in kf.groups):
        problems.append("the deepstream-app configuration has no [sinkN] group")
    return problems, notes


__all__ = ["DEEPSTREAM_APP", "DEEPSTREAM_APP_DOC", "KeySpec", "NVINFER_CLASS_ATTRS", "NVINFER_DOC",
           "NVINFER_PROPERTY", "app_group_table", "validate_deepstream_app", "validate_nvinfer"]
