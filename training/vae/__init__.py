"""VAE math for the AdaVAE stage: Gaussian posteriors, the training objective and the evaluation estimators."""
