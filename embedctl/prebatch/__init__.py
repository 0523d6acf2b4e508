"""The `embedctl prebatch` engine: token cache + relevance labels (+ mined hard negatives) -> pre-batched folder.

It sits above both ``embedctl.data`` (caches, labels, the batch format) and ``embedctl.index`` (the exact
dense index that mining searches), so neither of those needs the other.
"""
