"""Jobs: the durable background work the worker runs, and the queue people see.

Embeddings, text read in images (OCR) and generated context (describe). Jobs build on the
workflows; they import no operator task and no adapter.
"""
