"""The knowledge base: documents on inference parallelism, their rules with stable IDs (:mod:`.rules`), and
retrieval (:mod:`.retriever`; the BM25 index is built on the first search)."""
