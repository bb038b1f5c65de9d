"""The CUDA C sources of the kernels, compiled at run time by NVRTC (:mod:`.compiler`).

Plain CUDA C with no header (not even ``cuda_fp16.h``: the float -> half conversion is one PTX
``cvt.rn.f16.f32``), so the same text compiles with JetPack 5's NVRTC 11.4 (Xavier, sm_72), JetPack
6's 12.x (Orin, sm_87) and a desktop CUDA 13 (H200, sm_90).  Each kernel takes ONE struct by value:
the frame table (device pointers and pitches of up to :data:`MAX_FRAMES` frames) travels as a kernel
parameter, so a launch needs no host-to-device copy and can be captured in a CUDA graph.  The
struct layouts are mirrored by ctypes structures in :mod:`.preprocess` and :mod:`.ssd`.

Discrete choices (input format, output channel order, layout) are compile-time macros, so each
(contract, format) pair gets a kernel without branches on them; numbers (sizes, geometry,
normalisation) are arguments, so one compiled kernel serves every frame size.
"""

from typing import Dict

MAX_FRAMES = 64  # frames per launch: 64 * 24 bytes of frame table stays far below the 4 KiB parameter limit

PREPROCESS_KERNEL = "jf_preprocess"
SSD_KERNEL = "jf_ssd_decode"
COPY_KERNEL = "jf_copy_nv12"
MAX_COPIES = 32  # frames per copy launch: 32 * 32 bytes of frame table

PREPROCESS_SOURCE = r"""
#define MAX_FRAMES %(max_frames)d
typedef unsigned char u8;
typedef unsigned short u16;

struct FrameRef {
    unsigned long long plane0;   /* NV12: Y plane; packed: the HxWx3 pixels */
    unsigned long long plane1;   /* NV12: interleaved UV plane; packed: unused */
    int pitch0;
    int pitch1;
};

struct PreArgs {
    FrameRef frames[MAX_FRAMES];
    unsigned long long out;
    double scale_x, scale_y;     /* double: a float32 sample position on a 1280-pixel row errs by ~1e-4 pixel */
    int count, src_w, src_h, out_w, out_h, fp16;
    int region_x0, region_y0, region_x1, region_y1, shift_x, shift_y;
    float y_offset, cy, crv, cgu, cgv, cbu;
    float a0, a1, a2, b0, b1, b2;
    float pad;
    int crop_x, crop_y;          /* the frame pixel of the source's (0, 0): a tile (ROI) of the frames, or 0, 0 */
    int reserved;
};

__device__ __forceinline__ float clamp255(float v) { return fminf(fmaxf(v, 0.0f), 255.0f); }

/* RGB of frame pixel (x, y), as float in [0, 255]. */
__device__ __forceinline__ void fetch_rgb(const FrameRef& f, const PreArgs& p, int x, int y,
                                          float& r, float& g, float& b) {
#if IN_FORMAT == 0
    const u8* yrow = (const u8*)(f.plane0 + (unsigned long long)y * f.pitch0);
    const u8* uvrow = (const u8*)(f.plane1 + (unsigned long long)(y >> 1) * f.pitch1);
    float yy = p.cy * ((float)yrow[x] - p.y_offset);
    float u = (float)uvrow[x & ~1] - 128.0f;
    float v = (float)uvrow[(x & ~1) + 1] - 128.0f;
    r = clamp255(yy + p.crv * v);
    g = clamp255(yy + p.cgu * u + p.cgv * v);
    b = clamp255(yy + p.cbu * u);
#else
    const u8* px = (const u8*)(f.plane0 + (unsigned long long)y * f.pitch0) + 3 * x;
#if IN_FORMAT == 1
    r = (float)px[0]; g = (float)px[1]; b = (float)px[2];
#else
    b = (float)px[0]; g = (float)px[1]; r = (float)px[2];
#endif
#endif
}

#ifndef JF_F32_TO_F16  /* round to nearest even; the tests compile this source for the CPU with their own */
#define JF_F32_TO_F16(h, v) asm("cvt.rn.f16.f32 %%0, %%1;" : "=h"(h) : "f"(v))
#endif

__device__ __forceinline__ void store(const PreArgs& p, unsigned long long index, float v) {
    if (p.fp16) {
        u16 h;
        JF_F32_TO_F16(h, v);
        ((u16*)p.out)[index] = h;
    } else {
        ((float*)p.out)[index] = v;
    }
}

extern "C" __global__ void jf_preprocess(const PreArgs p) {
    const int ox = blockIdx.x * blockDim.x + threadIdx.x;
    const int oy = blockIdx.y * blockDim.y + threadIdx.y;
    const int n = blockIdx.z;
    if (ox >= p.out_w || oy >= p.out_h || n >= p.count) return;
    float r, g, b;
    if (ox >= p.region_x0 && ox < p.region_x1 && oy >= p.region_y0 && oy < p.region_y1) {
        /* cv2.resize INTER_LINEAR: half-pixel centres, border pixel replicated */
        double fx = fmin(fmax(((double)(ox + p.shift_x) + 0.5) * p.scale_x - 0.5, 0.0), (double)(p.src_w - 1));
        double fy = fmin(fmax(((double)(oy + p.shift_y) + 0.5) * p.scale_y - 0.5, 0.0), (double)(p.src_h - 1));
        int x0 = (int)fx, y0 = (int)fy;
        int x1 = min(x0 + 1, p.src_w - 1), y1 = min(y0 + 1, p.src_h - 1);
        float ax = (float)(fx - (double)x0), ay = (float)(fy - (double)y0);
        const FrameRef f = p.frames[n];
        /* a tile is sampled as an image of its own (clamped to its own border, as cv2.resize of the cut tile);
           its pixels are read at their frame position, so NV12 chroma keeps the frame's 2x2 grid at any origin */
        const int cx0 = x0 + p.crop_x, cx1 = x1 + p.crop_x, cy0 = y0 + p.crop_y, cy1 = y1 + p.crop_y;
        float r00, g00, b00, r01, g01, b01, r10, g10, b10, r11, g11, b11;
        fetch_rgb(f, p, cx0, cy0, r00, g00, b00);
        fetch_rgb(f, p, cx1, cy0, r01, g01, b01);
        fetch_rgb(f, p, cx0, cy1, r10, g10, b10);
        fetch_rgb(f, p, cx1, cy1, r11, g11, b11);
        float rt = r00 + (r01 - r00) * ax, gt = g00 + (g01 - g00) * ax, bt = b00 + (b01 - b00) * ax;
        float rb = r10 + (r11 - r10) * ax, gb = g10 + (g11 - g10) * ax, bb = b10 + (b11 - b10) * ax;
        r = rt + (rb - rt) * ay; g = gt + (gb - gt) * ay; b = bt + (bb - bt) * ay;
    } else {
        r = p.pad; g = p.pad; b = p.pad;
    }
    const unsigned long long plane = (unsigned long long)p.out_w * p.out_h;
#if OUT_ORDER == 2
    float c0 = 0.299f * r + 0.587f * g + 0.114f * b;
    float v[1] = {c0 * p.a0 + p.b0};
    const int channels = 1;
#elif OUT_ORDER == 1
    float v[3] = {b * p.a0 + p.b0, g * p.a1 + p.b1, r * p.a2 + p.b2};
    const int channels = 3;
#else
    float v[3] = {r * p.a0 + p.b0, g * p.a1 + p.b1, b * p.a2 + p.b2};
    const int channels = 3;
#endif
    const unsigned long long pixel = (unsigned long long)oy * p.out_w + ox;
    for (int c = 0; c < channels; ++c) {
#if NHWC
        store(p, ((unsigned long long)n * plane + pixel) * channels + c, v[c]);
#else
        store(p, ((unsigned long long)n * channels + c) * plane + pixel, v[c]);
#endif
    }
}
"""

SSD_SOURCE = r"""
struct SsdArgs {
    unsigned long long enc;      /* (count, A, 4) float: ty, tx, th, tw */
    unsigned long long logits;   /* (count, A, classes) float, column 0 = background */
    unsigned long long anchors;  /* (A, 4) float: yc, xc, h, w of each anchor */
    unsigned long long out;      /* int header[4] (header[0] = candidates), then records */
    int count, num_anchors, classes, capacity, converter;
    float sf0, sf1, sf2, sf3, logit_scale, threshold;
};

/* record: anchor (int), frame (int), ymin, xmin, ymax, xmax, score of each class but the background */
extern "C" __global__ void jf_ssd_decode(const SsdArgs p) {
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y;
    if (a >= p.num_anchors || n >= p.count) return;
    const float* logit = (const float*)p.logits + ((unsigned long long)n * p.num_anchors + a) * p.classes;
    float scores[MAX_CLASSES];
    float best = -3.402823466e38f;  /* below any score, also an identity converter's */
    float top = logit[0] / p.logit_scale;
    for (int c = 1; c < p.classes; ++c) top = fmaxf(top, logit[c] / p.logit_scale);
    float total = 0.0f;
    if (p.converter == 1) {
        for (int c = 0; c < p.classes; ++c) total += expf(logit[c] / p.logit_scale - top);
    }
    for (int c = 1; c < p.classes; ++c) {
        float x = logit[c] / p.logit_scale;
        float s;
        if (p.converter == 0) s = 1.0f / (1.0f + expf(-x));
        else if (p.converter == 1) s = expf(x - top) / total;
        else s = x;
        scores[c - 1] = s;
        best = fmaxf(best, s);
    }
    if (!(best > p.threshold)) return;
    const float* e = (const float*)p.enc + ((unsigned long long)n * p.num_anchors + a) * 4;
    const float* an = (const float*)p.anchors + (unsigned long long)a * 4;
    float yca = an[0], xca = an[1], ha = an[2], wa = an[3];
    float ty = e[0] / p.sf0, tx = e[1] / p.sf1, th = e[2] / p.sf2, tw = e[3] / p.sf3;
    float w = expf(tw) * wa, h = expf(th) * ha;
    float yc = ty * ha + yca, xc = tx * wa + xca;
    int slot = atomicAdd((int*)p.out, 1);
    if (slot >= p.capacity) return;
    const int width = 6 + p.classes - 1;
    float* rec = (float*)p.out + 4 + (unsigned long long)slot * width;
    ((int*)rec)[0] = a;
    ((int*)rec)[1] = n;
    rec[2] = yc - h / 2.0f; rec[3] = xc - w / 2.0f; rec[4] = yc + h / 2.0f; rec[5] = xc + w / 2.0f;
    for (int c = 1; c < p.classes; ++c) rec[5 + c] = scores[c - 1];
}
"""

# Owned copies of decoded NV12 frames (the decoder reuses its surfaces): the pitched Y and UV planes of up to
# MAX_COPIES frames into contiguous (H*3/2, W) buffers in ONE launch, instead of two cudaMemcpy2DAsync calls a frame
# (the host-side work per frame is what bounds the GPU path at 16 and 32 streams).  One thread moves ``unit`` bytes
# of a row: 8 when every address, the pitch and the width are multiples of 8 (the host checks), else 1.
COPY_SOURCE = r"""
#define MAX_COPIES %(max_copies)d
typedef unsigned char u8;
typedef unsigned long long u64;

struct CopyRef {
    u64 y;        /* the decoder's Y plane */
    u64 uv;       /* its interleaved UV plane (height / 2 rows) */
    u64 dst;      /* the owned buffer: height Y rows, then height / 2 UV rows, each width bytes */
    int pitch;    /* the source planes' row pitch in bytes */
    int reserved;
};

struct CopyArgs {
    CopyRef frames[MAX_COPIES];
    int count, width, height, unit;
};

extern "C" __global__ void jf_copy_nv12(const CopyArgs p) {
    const int n = blockIdx.z;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  /* in units of p.unit bytes */
    if (n >= p.count || row >= p.height + p.height / 2 || col * p.unit >= p.width) return;
    const CopyRef& f = p.frames[n];
    const u64 src = row < p.height ? f.y + (u64)row * f.pitch : f.uv + (u64)(row - p.height) * f.pitch;
    const u64 dst = f.dst + (u64)row * p.width;
    if (p.unit == 8) ((u64*)dst)[col] = ((const u64*)src)[col];
    else ((u8*)dst)[col] = ((const u8*)src)[col];
}
"""


def copy_source() -> str:
    """The batched NV12 copy kernel."""
    return COPY_SOURCE % {"max_copies": MAX_COPIES}


def preprocess_source(input_format: str, out_order: str, nhwc: bool) -> str:
    """The preprocessing kernel for one (frame format, output channel order, layout)."""
    macros: Dict[str, int] = {"IN_FORMAT": ("nv12", "rgb", "bgr").index(input_format),
                              "OUT_ORDER": ("rgb", "bgr", "gray").index(out_order), "NHWC": int(bool(nhwc))}
    head = "".join("#define %s %d\n" % item for item in sorted(macros.items()))
    return head + PREPROCESS_SOURCE % {"max_frames": MAX_FRAMES}


def ssd_source(classes: int) -> str:
    """The SSD decode kernel for ``classes`` score columns (background included)."""
    return "#define MAX_CLASSES %d\n" % max(1, classes - 1) + SSD_SOURCE


__all__ = ["COPY_KERNEL", "COPY_SOURCE", "MAX_COPIES", "MAX_FRAMES", "PREPROCESS_KERNEL", "PREPROCESS_SOURCE",
           "SSD_KERNEL", "SSD_SOURCE", "copy_source", "preprocess_source", "ssd_source"]
