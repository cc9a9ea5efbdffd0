"""Right (another loop primitive): the checkpointed model applied per example with jax.lax.map
(a scan) over a batch of one, x[None], and the output row taken back; the Dense layers and the
remat2 sit inside the scan's body, which the judge runs trip by trip (checks.run_loop). A
fori_loop of one step around model.apply is a scan too. (Red team; was graded 5/14.)
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    rows = jax.lax.map(lambda row: model.apply(variables, row), x[None])
    return rows[0]
