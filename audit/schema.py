"""How a table is declared: :class:`Column` (name, dtype, nullable, meaning) and :class:`Table`.

A :class:`Table` is data: the Parquet schema (:meth:`Table.arrow_schema`), empty frames
(:meth:`Table.empty`), rows by name (:meth:`Table.row`, :meth:`Table.frame`) and checks
(:meth:`Table.validate`, which collects every problem into one error, like pandera's lazy mode)
all come from one declaration. The tables themselves are declared in :mod:`audit.tables`.

Dtype names (pandas dtype / Arrow type):

========  ==========================  ===========================
``str``   ``str`` (missing = NaN)     ``string``
``int``   ``int64``                   ``int64``
``Int``   ``Int64`` (nullable)        ``int64``
``Float`` ``Float64`` (nullable)      ``float64``
``bool``  ``boolean`` (nullable)      ``bool``
``time``  ``datetime64[ns, UTC]``     ``timestamp[ns, UTC]`` (files: ``us``)
``bytes`` ``object`` (bytes)          ``large_binary``
``float`` ``float64`` (missing = NaN) ``float64``
``flag``  ``bool`` (never missing)    ``bool``
``list``  ``object`` (tuples of str)  ``list<string>``
========  ==========================  ===========================
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from audit.errors import SchemaError

if TYPE_CHECKING:
    import pandas as pd
    from pandas.api.extensions import ExtensionDtype

    #: A pandas column dtype: numpy's own, or a pandas extension dtype (``Int64``, ``string``).
    PandasDtype: TypeAlias = np.dtype[Any] | ExtensionDtype

__all__ = ["ORIGINS", "Column", "Table"]


@functools.cache
def _pandas_dtypes() -> dict[str, PandasDtype]:
    """Dtype name -> pandas dtype; built on first use, so that declaring tables (and the Arrow
    schemas) does not import pandas."""
    import pandas as pd  # start-up: pandas on first use (the verify route goes without)

    return {
        "str": pd.StringDtype(na_value=np.nan),
        "int": np.dtype("int64"),
        "Int": pd.Int64Dtype(),
        "Float": pd.Float64Dtype(),
        "bool": pd.BooleanDtype(),
        "time": pd.DatetimeTZDtype("ns", "UTC"),
        "bytes": np.dtype(object),
        "float": np.dtype("float64"),
        "flag": np.dtype(bool),
        "list": np.dtype(object),
    }


_ARROW: dict[str, pa.DataType] = {
    "str": pa.string(),
    "int": pa.int64(),
    "Int": pa.int64(),
    "Float": pa.float64(),
    "bool": pa.bool_(),
    "time": pa.timestamp("ns", tz="UTC"),
    "bytes": pa.large_binary(),
    "float": pa.float64(),
    "flag": pa.bool_(),
    "list": pa.list_(pa.string()),
}
#: What ``pa.Table.from_pandas`` makes of a column in each declared dtype: its Arrow type and
#: its entry in the ``pandas`` schema metadata (``pandas_type``, ``numpy_type``, ``metadata``).
#: ``bytes`` and ``list`` columns are object columns: their Arrow type depends on the values.
_FROM_PANDAS: dict[str, tuple[pa.DataType, str, str, dict | None]] = {
    "str": (pa.large_string(), "object", "str", None),
    "int": (pa.int64(), "int64", "int64", None),
    "Int": (pa.int64(), "int64", "Int64", None),
    "Float": (pa.float64(), "float64", "Float64", None),
    "bool": (pa.bool_(), "bool", "boolean", None),
    "time": (pa.timestamp("ns", tz="UTC"), "datetimetz", "datetime64[ns]", {"timezone": "UTC"}),
    "float": (pa.float64(), "float64", "float64", None),
    "flag": (pa.bool_(), "bool", "bool", None),
}


#: Where a column of a delivery table comes from (:attr:`Column.origin`); analysis tables
#: leave it empty.
ORIGINS: dict[str, str] = {
    "capture": "the capture record: one of its fields, a delivery header, or where it was read",
    "extraction": "read from the body (its JSON envelope, or a hash of it)",
    "verdict": "the reader, for a record it cannot read; verification for every other",
    "verification": "verifying the signature against the secrets",
    "store": "added by the evidence store when it writes the row",
}

#: The word ``docs/tables.md`` uses for each dtype (:meth:`Table.markdown`).
_DOC_DTYPE: dict[str, str] = {
    "str": "str",
    "int": "int64",
    "Int": "Int64",
    "Float": "Float64",
    "bool": "boolean",
    "time": "datetime",
    "bytes": "bytes (object)",
    "float": "float64",
    "flag": "bool",
    "list": "list of str",
}


@dataclass(frozen=True)
class Column:
    """One column: ``name``, ``dtype`` (a key of the table above), ``nullable``, ``meaning``;
    for a delivery column also ``origin`` (a key of :data:`ORIGINS`), ``key`` (the field of a
    capture record it is read from, for a capture column that has one) and ``verdicts``
    (``audit verify`` writes it: ``verdicts.csv``)."""

    name: str
    dtype: str
    nullable: bool
    meaning: str
    origin: str = ""
    key: str | None = None
    verdicts: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in _ARROW:
            raise ValueError(f"column {self.name}: unknown dtype {self.dtype!r}")
        if self.origin and self.origin not in ORIGINS:
            raise ValueError(f"column {self.name}: unknown origin {self.origin!r}")
        if self.key is not None and self.origin != "capture":
            raise ValueError(f"column {self.name}: only a capture column is read from a key")


@dataclass(frozen=True)
class Table:
    """A named, ordered set of columns."""

    name: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        """Column names in order."""
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        """The column called ``name`` (KeyError if it is not declared)."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def dtypes(self) -> dict[str, PandasDtype]:
        """Column name -> pandas dtype."""
        dtypes = _pandas_dtypes()
        return {c.name: dtypes[c.dtype] for c in self.columns}

    def arrow_schema(self) -> pa.Schema:
        """The Arrow (and Parquet) schema, with each column's meaning as field metadata."""
        return pa.schema(
            [
                pa.field(c.name, _ARROW[c.dtype], c.nullable, {"meaning": c.meaning})
                for c in self.columns
            ]
        )

    def parquet_schema(self) -> pa.Schema:
        """:meth:`arrow_schema` as files keep it: times as microseconds, UTC (Parquet
        ``TIMESTAMP(MICROS, UTC)``, which Spark, Trino, Athena and BigQuery read as timestamps
        with their default settings; nanoseconds are not read by all of them).

        >>> t = Table("t", (Column("at", "time", True, "when"),))
        >>> t.parquet_schema().field("at").type
        TimestampType(timestamp[us, tz=UTC])
        """
        return pa.schema(
            [
                f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                for f in self.arrow_schema()
            ]
        )

    def pandas_schema(self, names: Sequence[str]) -> pa.Schema:
        """The Arrow schema ``pa.Table.from_pandas(frame, preserve_index=False)`` gives a frame
        of these columns in their declared dtypes, ``pandas`` metadata included (so a Parquet
        file reads back into pandas in those dtypes), built without importing pandas.

        Casting a table of these columns (in :meth:`arrow_schema` types) to it gives what a
        round trip through pandas gives. ValueError for a ``bytes`` or ``list`` column.
        """
        fields, described = [], []
        for name in names:
            c = self.column(name)
            if c.dtype not in _FROM_PANDAS:
                raise ValueError(f"{self.name}: column {name!r} ({c.dtype}) depends on values")
            arrow_type, pandas_type, numpy_type, metadata = _FROM_PANDAS[c.dtype]
            fields.append(pa.field(name, arrow_type))
            described.append(
                {
                    "name": name,
                    "field_name": name,
                    "pandas_type": pandas_type,
                    "numpy_type": numpy_type,
                    "metadata": metadata,
                }
            )
        pandas = {  # as pyarrow.pandas_compat.construct_metadata writes it
            "index_columns": [],
            "column_indexes": [],
            "columns": described,
            "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": version("pandas"),
        }
        return pa.schema(fields, metadata={b"pandas": json.dumps(pandas).encode("utf8")})

    def empty(self) -> pd.DataFrame:
        """A frame with no rows and every column in its declared dtype."""
        import pandas as pd  # start-up: pandas only where a frame is made

        dtypes = _pandas_dtypes()
        return pd.DataFrame({c.name: pd.Series([], dtype=dtypes[c.dtype]) for c in self.columns})

    def row(self, **values: object) -> dict[str, object]:
        """One row by column name: every declared column, missing ones None; an undeclared
        name is a KeyError (a typo cannot add a column).

        >>> t = Table("t", (Column("a", "str", True, "a"), Column("b", "Int", True, "b")))
        >>> t.row(b=1)
        {'a': None, 'b': 1}
        """
        unknown = set(values) - set(self.names)
        if unknown:
            raise KeyError(f"{self.name}: no column {', '.join(sorted(unknown))}")
        return {n: values.get(n) for n in self.names}

    def frame(self, rows: list[dict[str, object]]) -> pd.DataFrame:
        """Rows (from :meth:`row`) as a frame in the declared column order and dtypes."""
        import pandas as pd  # start-up: pandas only where a frame is made

        if not rows:
            return self.empty()
        dtypes = _pandas_dtypes()
        out = {}
        for c in self.columns:
            values = [r.get(c.name) for r in rows]
            if c.dtype in ("bytes", "list"):
                out[c.name] = pd.Series(values, dtype=object)
            elif c.dtype == "time":
                times = pd.to_datetime(pd.Series(values, dtype=object), utc=True)
                out[c.name] = times.astype(dtypes["time"])
            elif not c.nullable and any(v is None for v in values):
                raise SchemaError(f"{self.name}: column {c.name!r} cannot be missing")
            else:
                out[c.name] = pd.Series(values).astype(dtypes[c.dtype])
        return pd.DataFrame(out)

    def names_from(self, *origins: str) -> tuple[str, ...]:
        """The names of the columns that come from any of ``origins``, in order."""
        return tuple(c.name for c in self.columns if c.origin in origins)

    def markdown(self, names: Sequence[str] | None = None) -> str:
        """The rows of ``docs/tables.md`` for these columns (default: all): column, dtype,
        where it comes from, ``yes`` when ``audit verify`` writes it, meaning. The docs hold
        these rows as they are (``tests/test_tables.py``); print them after a change:
        ``python -c "from audit.tables import DELIVERIES; print(DELIVERIES.markdown())"``.

        >>> t = Table("t", (Column("at", "time", True, "when", "capture", "at", True),))
        >>> print(t.markdown())
        | `at` | datetime | capture (`at`) | yes | when |
        """
        rows = []
        for name in self.names if names is None else names:
            c = self.column(name)
            origin = f"{c.origin} (`{c.key}`)" if c.key else c.origin
            verdicts = "yes" if c.verdicts else ""
            rows.append(
                f"| `{name}` | {_DOC_DTYPE[c.dtype]} | {origin} | {verdicts} | {c.meaning} |"
            )
        return "\n".join(rows)

    def extend(self, name: str, *columns: Column) -> Table:
        """A new table with these columns after this one's."""
        return Table(name, (*self.columns, *columns))

    def problems(self, df: pd.DataFrame) -> list[str]:
        """Every way ``df`` departs from the schema (missing columns, dtypes, nulls)."""
        import pandas as pd  # start-up: pandas only where a frame is checked

        dtypes = _pandas_dtypes()
        out = []
        for c in self.columns:
            if c.name not in df.columns:
                out.append(f"missing column {c.name!r}")
                continue
            s = df[c.name]
            want = dtypes[c.dtype]
            if c.dtype == "time":
                ok = isinstance(s.dtype, pd.DatetimeTZDtype) and str(s.dtype.tz) == "UTC"
            elif c.dtype == "str":
                ok = pd.api.types.is_string_dtype(s.dtype) and s.dtype != object
            else:
                ok = s.dtype == want
            if not ok:
                out.append(f"column {c.name!r} has dtype {s.dtype}, expected {want}")
            if not c.nullable and len(s) and bool(s.isna().any()):
                out.append(f"column {c.name!r} has {int(s.isna().sum())} missing value(s)")
        return out

    def validate(self, df: pd.DataFrame) -> pd.DataFrame:
        """Return ``df`` unchanged, or raise one SchemaError listing every problem.

        >>> t = Table("t", (Column("a", "str", False, "a"), Column("b", "Int", True, "b")))
        >>> import pandas as pd
        >>> t.validate(pd.DataFrame({"a": [1]}))
        Traceback (most recent call last):
        ...
        audit.errors.SchemaError: t: column 'a' has dtype int64, expected str; missing column 'b'
        """
        found = self.problems(df)
        if found:
            raise SchemaError(f"{self.name}: " + "; ".join(found))
        return df

    def conform(self, df: pd.DataFrame) -> pd.DataFrame:
        """The declared columns of ``df`` in order, cast to their declared dtypes."""
        import pandas as pd  # start-up: pandas only where a frame is cast

        dtypes = _pandas_dtypes()
        out = {}
        for c in self.columns:
            s = df[c.name]
            if c.dtype == "time":
                out[c.name] = s.astype(dtypes["time"])
            elif c.dtype != "bytes" and s.dtype != dtypes[c.dtype]:
                out[c.name] = s.astype(dtypes[c.dtype])
            else:
                out[c.name] = s
        return pd.DataFrame(out, index=df.index)
