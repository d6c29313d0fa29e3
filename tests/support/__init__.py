"""Fakes and helpers the tests share (test files hold only tests): emulated KFP backend, Kubernetes and TF Serving
APIs, shared pipeline runs, browsers, a test-only third model family."""
