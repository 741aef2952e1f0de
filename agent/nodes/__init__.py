"""Graph nodes: small sync functions returning partial state updates; the work lives in pure modules."""
