"""DLA placement analysis: which layers of an ONNX model a Jetson DLA core can run, and why not.

``rules`` is the documented restriction set as data (each rule cites its primary source),
``graph`` reads the shape-inferred ONNX graph, ``facts`` computes what the rules read per layer,
``analyze`` maps ONNX nodes to TensorRT layer kinds and evaluates the rules, ``subgraphs`` counts
the DLA loadables, ``report`` renders the result as a table or JSON.
Nothing here needs a board or TensorRT; ``onnx`` is imported inside functions.
"""
