"""pipeline.kubeflow.training."""
