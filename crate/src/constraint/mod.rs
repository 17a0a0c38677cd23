//! Constrained decoding: grammars that limit which tokens the sampler may pick (llguidance underneath).
pub mod gbnf;
