// A fixed random projection of embedding rows to fewer dimensions, for traces: the
// semantic key fMoE matches on (Eq. 4) is a row of the model's width (4096 for
// Mixtral), too many numbers to store per iteration; cosine similarities survive a
// random projection (Johnson–Lindenstrauss: their error shrinks as 1/sqrt(N)).
//
// y_i = (1/sqrt(N)) · Σ_j s(i, j) · x_j, with signs s(i, j) = ±1 taken from a hash of
// (i, j) (Achlioptas' ±1 projection), so every recorder and every width projects the
// same way and no matrix is stored. With N >= the row's width the row is kept as it is.
#pragma once
#include <cstdint>
#include <vector>

namespace moeflow {

// The sign s(i, j) of the projection (+1 or -1).
int projection_sign(int64_t i, int64_t j);

// x (width numbers) projected to n_out numbers, or x itself when n_out >= width.
std::vector<float> project_embedding(const std::vector<float>& x, int64_t n_out);

}  // namespace moeflow
