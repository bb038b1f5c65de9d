"""The GPU video path's decoding: NVDEC (PyNvVideoCodec) and jetson-utils sources (`open`: the `nvdec://` and `jetson://`
kinds), owned device frames (`frame`), decode threads and one feeder thread for many streams (`nvdec_threaded`,
`feed_group`), device frame rings (`device_ring`) and decoding in worker processes with CUDA IPC (`ipc_decode`,
`ipc_ring`)."""
