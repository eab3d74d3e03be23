"""A small inbox: list the emails, search them, read one. Loaded from a JSON fixture per episode."""

from __future__ import annotations

import json

from agentenv import Env, ToolError, tool


class Mailbox(Env):
    """Three emails. Every episode starts from the fixture, so deletions never leak across episodes."""

    def deploy(self) -> None:
        path = self.bundle_dir / self.config.get("fixture", "emails.json")
        self.emails = {m["id"]: m for m in json.loads(path.read_text(encoding="utf-8"))}

    @tool({"type": "object", "properties": {}, "additionalProperties": False})
    def list_emails(self) -> list[dict[str, str]]:
        """List the emails: id, sender, date and subject of each."""
        return [{k: m[k] for k in ("id", "from", "date", "subject")} for m in self.emails.values()]

    @tool(
        {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words to look for in the sender, subject and body.",
                },
                "field": {
                    "type": "string",
                    "enum": ["any", "from", "subject", "body"],
                    "description": "Where to look (default: any).",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        }
    )
    def search(self, query: str, field: str = "any") -> list[str]:
        """Ids of the emails that contain every word of the query."""
        words = query.lower().split()
        keys = ("from", "subject", "body") if field == "any" else (field,)
        hits = []
        for m in self.emails.values():
            text = " ".join(m[k] for k in keys).lower()
            if all(w in text for w in words):
                hits.append(m["id"])
        return hits

    @tool(
        {
            "type": "object",
            "properties": {"id": {"type": "string", "description": "The email's id, as list_emails shows it."}},
            "required": ["id"],
            "additionalProperties": False,
        }
    )
    def read_email(self, id: str) -> dict[str, str]:
        """The whole email with this id."""
        if id not in self.emails:
            raise ToolError(f"no email {id!r}; the ids are {', '.join(self.emails)}")
        return self.emails[id]

    @tool(
        {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
            "additionalProperties": False,
        }
    )
    def delete_email(self, id: str) -> str:
        """Delete the email with this id (admins only)."""
        self.emails.pop(id, None)
        return f"deleted {id}"
