"""The wire: the connection, reading a server-sent event stream, the chat client, and what each
server flavour sends."""
