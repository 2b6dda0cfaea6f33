"""Vectors on the wire: pgvector's binary formats, registered on every pooled connection.

A vector parameter used to be sent as a binary ``real[]`` and cast to the index's type in SQL.
asyncpg encodes such an array element by element, checking each of the 1,024 floats against
``collections.abc`` in Python: about 0.4 ms of the event loop per vector sent, on every search
and every saved vector (docs/performance.md). pgvector's own binary format (``vector_recv``,
``halfvec_recv``: the dimensions and a reserved zero as 16-bit integers, then the elements in
network order) is one numpy conversion: about 0.01 ms.

:func:`register_vector_codecs` teaches one asyncpg connection these formats for the
extension's ``vector`` and ``halfvec`` types; ``memory_db.database.create_engine`` runs it on
every connection its pool opens. A parameter cast to either type (``CAST(:q AS halfvec(1024))``)
then takes a float32 array (or any sequence of floats), and a column of either type reads as a
list of floats. numpy is imported when a vector is first sent or read, not with this module: an
operator command that opens a connection and sends no vector does not pay for it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Each type's elements as pgvector sends and receives them: big-endian float32 and float16.
WIRE_ELEMENTS = {"vector": ">f4", "halfvec": ">f2"}
_HEADER = struct.Struct(">HH")  # dimensions, then a reserved zero
_EXTENSION_SCHEMA = (
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
    "WHERE e.extname = 'vector'"
)


def encoder(element: str) -> Callable[[Sequence[float] | np.ndarray], bytes]:
    """The binary encoder of ``element`` (``vector`` or ``halfvec``) for asyncpg."""
    dtype = WIRE_ELEMENTS[element]

    def encode(value: Sequence[float] | np.ndarray) -> bytes:
        import numpy as np

        # Through float32, as the real[] parameter and its cast rounded before: a vector stored
        # or searched is the same to the last bit as it was.
        array = np.asarray(value, dtype=np.float32)
        if array.ndim != 1:
            raise ValueError(f"a {element} is one row of numbers, not an array of {array.ndim}")
        return _HEADER.pack(array.shape[0], 0) + array.astype(dtype).tobytes()

    return encode


def decoder(element: str) -> Callable[[bytes], list[float]]:
    """The binary decoder of ``element`` for asyncpg: the elements as Python floats."""
    dtype = WIRE_ELEMENTS[element]

    def decode(data: bytes) -> list[float]:
        import numpy as np

        dimensions, _ = _HEADER.unpack_from(data)
        elements = np.frombuffer(data, dtype=dtype, count=dimensions, offset=_HEADER.size)
        values: list[float] = elements.astype(np.float64).tolist()
        return values

    return decode


async def register_vector_codecs(connection: Any) -> bool:
    """Register the binary codecs on one asyncpg connection; False without the extension.

    A database migrated later (the extension created after this connection opened) needs new
    connections: ``memory_db.migrate`` empties the pool after it changes the schema.
    """
    schema = await connection.fetchval(_EXTENSION_SCHEMA)
    if schema is None:
        return False
    for element in WIRE_ELEMENTS:
        await connection.set_type_codec(
            element,
            schema=schema,
            encoder=encoder(element),
            decoder=decoder(element),
            format="binary",
        )
    # Each codec set drops asyncpg's statements, its own type lookups among them, to be closed
    # before the connection's next statement: closed here, so that the first unit of work on a
    # new connection does not pay that round trip.
    await connection.fetchval(_EXTENSION_SCHEMA)
    return True
