-- Prebuild webhooks (issue 43): a forge's push webhook makes the server look at a project's
-- ref at once rather than at its next poll. The secret it is checked with is sealed with the
-- server's key, as GitOps repositories' are; NULL while the project has none.
ALTER TABLE projects ADD COLUMN prebuild_webhook_secret TEXT;
