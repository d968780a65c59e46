"""Data: reading reports (`reports/`), mining supervision from them (`mining/`), manifests of public
datasets (`public_datasets`), and the synthetic cohort (`phantom/`)."""
