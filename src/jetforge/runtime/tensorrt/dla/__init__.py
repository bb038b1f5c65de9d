"""DLA placement analysis: which layers of an ONNX model a Jetson DLA core can run, and why not.

``rules`` is the documented restriction set as data (each rule cites its primary source),
``graph`` reads the shape-inferred ONNX graph, ``facts`` computes what the rules read per layer,
``analyze`` maps ONNX nodes to TensorRT layer kinds and evaluates the rules, ``subgraphs`` counts
the DLA loadables, ``transitions`` the GPU<->DLA crossings (count, bytes), ``advice`` says what to do about a
fallback, ``fold_time`` is the exact rewrite that folds a clip's time axis into the batch for the per-frame
layers of a (2+1)D / 3-D network, ``report`` renders the result as a table or JSON.
Nothing here needs a board or TensorRT; ``onnx`` is imported inside functions.
"""
