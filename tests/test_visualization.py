"""mx.visualization: print_summary's table and plot_network's DOT text."""

import mxfn as mx


def test_print_summary_counts_params(capsys):
    d = mx.sym.variable("data")
    fc1 = mx.sym.fully_connected(d, num_hidden=128, name="fc1")
    fc2 = mx.sym.fully_connected(mx.sym.relu(fc1, name="r"), num_hidden=10, name="fc2")
    text = mx.visualization.print_summary(fc2, {"data": (1, 784)})
    assert "fc1(FullyConnected)" in text and "100480" in text and "Total params: 101770" in text
    assert capsys.readouterr().out.strip() == text.strip()


def test_plot_network_dot():
    d = mx.sym.variable("data")
    fc = mx.sym.fully_connected(d, num_hidden=3, name="fc")
    dot = mx.visualization.plot_network(fc, shape={"data": (2, 5)})
    assert dot.startswith("digraph plot {") and '"fc" -> "data" [label="5"]' in dot
    assert "fc_weight" not in dot
