//! Byte ranges (RFC 9110 §14): `Range` and `If-Range` answered from a stored
//! full response, as a single part, `multipart/byteranges`, or 416.
