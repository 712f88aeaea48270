"""The integration tier: moto's server behind the fidelity proxy, real runner and local-mode
processes, the Lambda handlers, the CLI, the demo, the import graph, and the templates read
offline (cfn-lint, the SAM transform, checkov, IAM)."""
