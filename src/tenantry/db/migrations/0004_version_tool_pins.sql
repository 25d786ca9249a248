-- Each agent version records, when it is published, which registered server served each of
-- its tools and the hash of that server's tool list at that moment: what was reviewed.
ALTER TABLE agent_versions ADD COLUMN tool_pins jsonb NOT NULL DEFAULT '{}'::jsonb;
