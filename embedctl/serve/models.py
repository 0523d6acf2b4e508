"""Request and response bodies of the service (pydantic). Room is left for later fields: a search request
may grow ``filter`` (metadata filters) and ``mode`` (dense / lexical / hybrid) without breaking clients,
since unknown fields are refused today (a typo is a 422 naming the field, not a silent default)."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Strict):
    """``{"queries": [...], "k": 10}`` or ``{"query": "...", "k": 10}`` (exactly one of the two)."""

    queries: Optional[list[str]] = Field(None, description="Query texts; one list of hits per query.")
    query: Optional[str] = Field(None, description="One query text (the answer still holds one list).")
    k: int = Field(10, ge=1, description="Hits per query (at most serve.max_k).")
    text: bool = Field(True, description="Return each hit's stored text and title (false: ids and scores).")


class SearchHit(BaseModel):
    id: str
    score: float
    text: Optional[str] = None
    title: Optional[str] = None


class SearchResponse(BaseModel):
    results: list[list[SearchHit]]
    version: int = Field(description="The committed index version these results were ranked on.")


class DocumentIn(_Strict):
    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    title: Optional[str] = None


class AddRequest(_Strict):
    documents: list[DocumentIn] = Field(description="Documents to add, or to replace by id.")


class DeleteRequest(_Strict):
    ids: list[str] = Field(description="Ids of documents to delete (unknown ids are reported, not an error).")


class WriteResponse(BaseModel):
    version: int = Field(description="The committed version holding this change (on disk when answered).")
    documents: Optional[int] = None
    deleted: Optional[int] = None
    unknown: Optional[list[str]] = None


class ErrorResponse(BaseModel):
    error: str
    fix: Optional[str] = None
    field: Optional[str] = None
    request_id: str
