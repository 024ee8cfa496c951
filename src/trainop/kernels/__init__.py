"""Fast paths of the algorithms' update rules, and the dispatch that picks one per bucket
(``dispatch``): ``foreach`` (torch's multi-tensor ops), ``fused`` (torch's fused optimizer
kernels where TF's math maps onto them), ``native`` (trainop's C kernels for the CPU, behind
one boundary, ``boundary``), ``triton`` (trainop's Triton kernels for CUDA, one ``Entry`` per
optimizer), and what they share: per-tensor norms (``norms``), sharded tensors' local parts
(``shards``), sparse rows (``row_slices``)."""
