"""pipeline.kubeflow."""
