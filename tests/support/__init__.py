"""Helpers the tests share (servers, clients, waiting, scripts); no test imports another test."""
