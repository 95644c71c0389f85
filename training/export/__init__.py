"""`c4prep export RUN_OR_CHECKPOINT OUT`: a trained run as a folder other tools load (``run_export``): T5 and GPT as
Hugging Face model folders with their tokenizer, AdaVAE as its tuned modules; each with a model card."""
