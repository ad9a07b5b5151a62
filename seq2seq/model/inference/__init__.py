"""The network's accelerators at inference, apart from the network (``seq2seq.model``):
compute types (``compute``), prepacked weights (``packed``), the fused one-token step
(``step``) and its compiled form (``compiled``), the vocabulary shortlist (``shortlist``),
the one output-projection decision (``output``), and ``features.Inference``, which a
``Seq2Seq`` declares to hold them. They import the network's parts, never ``Seq2Seq``'s
module (``tests/test_architecture.py``'s layers)."""
