// The supervisor ledger; see Ledger.swift.
