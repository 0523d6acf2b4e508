"""Request and response bodies of the service (pydantic). Unknown fields are refused (a typo is a 422 naming
the field, not a silent default)."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Strict):
    """``{"queries": [...], "k": 10}`` or ``{"query": "...", "k": 10}`` (exactly one of the two)."""

    queries: Optional[list[str]] = Field(None, description="Query texts; one list of hits per query.")
    query: Optional[str] = Field(None, description="One query text (the answer still holds one list).")
    k: int = Field(10, ge=1, description="Hits per query (at most serve.max_k).")
    text: bool = Field(True, description="Return each hit's stored text, title and fields (false: ids and scores).")
    filter: Optional[Union[str, dict[str, Any]]] = Field(
        None, description="Only documents this filter allows: an expression (`year >= 2015 and journal in "
                          "(\"Nature\", \"Cell\")`) or its JSON form (docs/filters.md); k hits whenever k pass.")
    mode: Optional[str] = Field(None, description="neural | lexical | hybrid (default: the server's search.mode).")


class SearchHit(BaseModel):
    id: str
    score: float
    text: Optional[str] = None
    title: Optional[str] = None
    fields: Optional[dict[str, Any]] = None
    passage: Optional[int] = Field(None, description="index.passages: the number of the document's best passage "
                                                     "(0: the first), whose text is `text`; absent otherwise.")


class SearchResponse(BaseModel):
    results: list[list[SearchHit]]
    version: int = Field(description="The committed index version these results were ranked on.")


class DocumentIn(_Strict):
    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    title: Optional[str] = None
    fields: Optional[dict[str, Any]] = Field(None, description="Metadata for filters and hits (docs/filters.md).")


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
