"""``DRMemorySpace``: the container every session and event lives in."""

from __future__ import annotations

from typing import Any, Self
from urllib.parse import quote

from django_pydantic_agent.memory_service.client import DRMemoryServiceClient, json_object
from django_pydantic_agent.memory_service.errors import (
    DRMemoryConflictError,
    DRMemoryServiceError,
)

__all__ = ["DRMemorySpace"]

_WIRE_NAMES = {
    "description": "description",
    "deduplication_key": "deduplicationKey",
    "llm_model_name": "llmModelName",
    "llm_base_url": "llmBaseUrl",
    "custom_instructions": "customInstructions",
}


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


class DRMemorySpace:
    """A memory space: a namespace owning sessions and events, private to its principal.

    Build instances with :meth:`post`, :meth:`get` or :meth:`list`, not directly.

    Attributes:
        description: Human-readable description (max 1000 characters).
        deduplication_key: Client-chosen unique key making :meth:`post` idempotent.
        llm_model_name: LLM used by ``extract_memories`` lifecycle strategies.
        llm_base_url: LLM base URL override.
        custom_instructions: Instructions given to the LLM when extracting memories.
        created_at: ISO-8601 creation timestamp from the service.
    """

    description: str | None
    deduplication_key: str | None
    llm_model_name: str | None
    llm_base_url: str | None
    custom_instructions: str | None
    created_at: str

    def __init__(self, client: DRMemoryServiceClient, data: dict[str, Any]) -> None:
        space_id = data.get("memorySpaceId")
        if not space_id:
            raise DRMemoryServiceError(
                f"The Memory Service returned a memory space without a memorySpaceId "
                f"(keys: {sorted(data)!r}); the endpoint may not be a Memory Service.",
            )
        self._client = client
        self._id = str(space_id)
        self._user_id = str(data.get("userId") or "")
        self._tenant_id = str(data.get("tenantId") or "")
        self.description = None
        self.deduplication_key = None
        self.llm_model_name = None
        self.llm_base_url = None
        self.custom_instructions = None
        self.created_at = ""
        self._apply(data)

    def _apply(self, data: dict[str, Any]) -> None:
        for attr, wire in _WIRE_NAMES.items():
            if wire in data:
                setattr(self, attr, _opt_str(data[wire]))
        if "createdAt" in data:
            self.created_at = str(data["createdAt"])

    @property
    def id(self) -> str:
        """Server-assigned memory space UUID."""
        return self._id

    @property
    def user_id(self) -> str:
        """Id of the owning user."""
        return self._user_id

    @property
    def tenant_id(self) -> str:
        """Tenant UUID of the owner."""
        return self._tenant_id

    @property
    def path(self) -> str:
        """This space's path relative to the client's base URL, ending in ``/``."""
        return f"{quote(self._id, safe='')}/"

    @property
    def client(self) -> DRMemoryServiceClient:
        """The client this space was read through; sessions and events reuse it."""
        return self._client

    def __repr__(self) -> str:
        return (
            f"DRMemorySpace(id={self._id!r}, deduplication_key={self.deduplication_key!r}, "
            f"description={self.description!r})"
        )

    @classmethod
    async def post(
        cls,
        client: DRMemoryServiceClient,
        *,
        description: str | None = None,
        deduplication_key: str | None = None,
        llm_model_name: str | None = None,
        llm_base_url: str | None = None,
        custom_instructions: str | None = None,
    ) -> Self:
        """Create a memory space, or adopt the caller's live space holding ``deduplication_key``.

        Only non-``None`` arguments are sent. Raises ``DRMemoryValidationError`` for values the
        service rejects (lengths, URL form).
        """
        values = {
            "description": description,
            "deduplication_key": deduplication_key,
            "llm_model_name": llm_model_name,
            "llm_base_url": llm_base_url,
            "custom_instructions": custom_instructions,
        }
        body = {_WIRE_NAMES[k]: v for k, v in values.items() if v is not None}
        try:
            response = await client.request("POST", "new/", json=body)
        except DRMemoryConflictError as exc:
            if not exc.existing_id:
                raise
            return await cls.get(client, exc.existing_id)
        return cls(client, json_object(response))

    @classmethod
    async def get(cls, client: DRMemoryServiceClient, space_id: str) -> Self:
        """Fetch a space by id.

        Raises:
            DRMemoryNotFoundError: If it does not exist, was deleted, or belongs to another
                principal.
        """
        response = await client.request("GET", f"{quote(space_id, safe='')}/")
        return cls(client, json_object(response))

    @classmethod
    async def list(
        cls,
        client: DRMemoryServiceClient,
        *,
        deduplication_key: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[Self]:
        """Return one page of the caller's live spaces (``limit`` 1-100), optionally by key.

        Not auto-paginated. Out-of-range ``offset``/``limit`` raise ``DRMemoryValidationError``.
        """
        params: dict[str, Any] = {"offset": offset, "limit": limit}
        if deduplication_key is not None:
            params["deduplicationKey"] = deduplication_key
        response = await client.request("GET", "", params=params)
        return [cls(client, item) for item in (json_object(response).get("items") or [])]

    async def patch(
        self,
        *,
        description: str | None = None,
        llm_model_name: str | None = None,
        llm_base_url: str | None = None,
        custom_instructions: str | None = None,
    ) -> None:
        """Change the given fields in place; omitted fields keep their stored values.

        Raises:
            ValueError: If no field is given (no request is sent).
        """
        values = {
            "description": description,
            "llm_model_name": llm_model_name,
            "llm_base_url": llm_base_url,
            "custom_instructions": custom_instructions,
        }
        body = {_WIRE_NAMES[k]: v for k, v in values.items() if v is not None}
        if not body:
            raise ValueError(
                f"DRMemorySpace.patch() on space {self._id!r} was given no field to change; "
                "pass at least one of description, llm_model_name, llm_base_url or "
                "custom_instructions."
            )
        response = await self._client.request("PATCH", self.path, json=body)
        self._apply(json_object(response))

    async def delete(self) -> None:
        """Soft-delete this space; its sessions and events become unreachable, its key freed."""
        await self._client.request("DELETE", self.path)
