"""No models (cronbase's tables are its own, created by its migrations): this module is here because
Django sends ``post_migrate`` only to apps that have one (see schema.apply_schema_without_migrations)."""
