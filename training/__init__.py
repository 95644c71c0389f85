"""Training stages (T5 span corruption, GPT, AdaVAE)."""
