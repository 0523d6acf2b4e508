"""The PLAID (ColBERTv2) engine: every computation of a compressed late-interaction index, nothing about files.

- reference.py: the plain, exact implementation of each computation (assignment, k-means step,
  compression, decompression, centroid interaction, MaxSim) and the reference backend;
- backends.py / native_backend.py: the backend chosen once per run (reference, native C kernels, torch on a
  GPU) and kernels.py / search_kernels.py, the ctypes fronts of the C kernels;
- kmeans.py, codec.py, ivf.py, sample.py: centroids, the residual codec, the inverted file, the k-means sample.

The builder that writes an index with them is embedctl/index/plaid_indexer.py, the on-disk format
embedctl/index/plaid_files.py, the searcher embedctl/search/plaid.py.
"""
