"""Data: reading reports (`reports/`), mining supervision from them (`mining/`), manifests of public
datasets (`adapters`), and the synthetic cohort (`phantom/`)."""
