// Runs after the SVG is parsed: tags <body> once the swimlane has a real layout box, so a
// headless browser's DOM dump shows that it rendered (and how big).
(function () {
  var svg = document.getElementById("swimlane");
  var box = svg ? svg.getBoundingClientRect() : null;
  var lanes = document.querySelectorAll("#swimlane g.lane").length;
  var cells = document.querySelectorAll("#swimlane g.cell").length;
  var bad = document.querySelectorAll("#swimlane g.cell.violation, #swimlane g.event.violation");
  if (box && box.width > 0 && box.height > 0) {
    document.body.setAttribute("data-swimlane",
      "rendered " + Math.round(box.width) + "x" + Math.round(box.height) +
      " lanes=" + lanes + " cells=" + cells + " violations=" + bad.length);
  }
})();
